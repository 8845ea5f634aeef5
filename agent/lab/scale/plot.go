package scale

import (
	"errors"
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one per-agent measure of scenario (b) against the fleet size:
// the law of growth the plot shows.
type Series struct {
	Name string // with its unit
	Of   func(Row) float64
}

// Growth lists the measures the plot and the fits show.
var Growth = []Series{
	{"bytes sent per agent per s (KB)", func(r Row) float64 { return r.Steady.BytesPerAgent / 1000 }},
	{"messages sent per agent per s", func(r Row) float64 { return r.Steady.MsgsPerAgent }},
	{"largest push-pull state (KB)", func(r Row) float64 { return float64(r.Steady.PushPull) / 1000 }},
	{"memberlist's push-pull exchange, each way (KB)", exchangeKB},
	{"heap per agent (MB)", func(r Row) float64 { return float64(r.Steady.HeapPerAgent) / 1e6 }},
}

// exchangeKB is the mean size of one direction of the streams (b) opened:
// memberlist's push-pulls and the agents' joins, each its whole membership
// plus this node's state (0: no stream in the window).
func exchangeKB(r Row) float64 {
	t := r.Steady.Traffic
	if t.StreamsOpened == 0 {
		return 0
	}
	return float64(t.StreamBytesSent) / float64(t.StreamsOpened) / 2 / 1000
}

// growthRows returns the rows the plot and the fits use: default tuning,
// no service time, (b) measured; by N.
func growthRows(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if r.ServiceTime == 0 && r.Tuning == "" && r.Steady.Deps > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return a.N - b.N })
	return out
}

// Fit is a least-squares line y = A + B·N of one series.
type Fit struct {
	Series string
	A, B   float64
	// MaxErr is the largest relative error of the line at a measured N.
	MaxErr float64
}

func (f Fit) String() string {
	sign, b := "+", f.B
	if b < 0 {
		sign, b = "−", -b
	}
	return fmt.Sprintf("%s ≈ %.3g %s %.3g·N (within %.0f%% at every N measured)", f.Series, f.A, sign, b, 100*f.MaxErr)
}

// Fits returns the least-squares line of each Growth series over the rows
// (default tuning, no service time); none with fewer than two sizes.
func Fits(rows []Row) []Fit {
	rs := growthRows(rows)
	if len(rs) < 2 {
		return nil
	}
	var out []Fit
	for _, s := range Growth {
		var sx, sy, sxx, sxy, n float64
		for _, r := range rs {
			x, y := float64(r.N), s.Of(r)
			if y == 0 { // not measured at this N (no stream in the window)
				continue
			}
			sx, sy, sxx, sxy, n = sx+x, sy+y, sxx+x*x, sxy+x*y, n+1
		}
		if n < 2 {
			continue
		}
		b := (n*sxy - sx*sy) / (n*sxx - sx*sx)
		f := Fit{Series: s.Name, A: (sy - b*sx) / n, B: b}
		for _, r := range rs {
			if y := s.Of(r); y != 0 {
				f.MaxErr = max(f.MaxErr, abs((f.A+f.B*float64(r.N)-y)/y))
			}
		}
		out = append(out, f)
	}
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Plot draws the Growth series of the rows (default tuning, no service
// time) against N, both axes logarithmic, to a PNG file at path.
func Plot(rows []Row, path string) error {
	rs := growthRows(rows)
	if len(rs) < 2 {
		return errors.New("scale: plot: fewer than two fleet sizes with scenario (b)")
	}
	p := plot.New()
	p.Title.Text = "Per agent, steady state with 100 busy dependencies (b)"
	p.X.Label.Text = "agents in the fleet (N)"
	p.Y.Label.Text = "per agent (unit in the legend)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(36) // clear of the y axis labels
	p.Add(plotter.NewGrid())
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	top := 0.0
	for i, s := range Growth {
		pts := make(plotter.XYs, 0, len(rs))
		for _, r := range rs {
			if y := s.Of(r); y > 0 { // a log scale has no 0
				pts = append(pts, plotter.XY{X: float64(r.N), Y: y})
				top = max(top, y)
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("scale: plot: %w", err)
		}
		l.Color, sc.Color = colors[i%len(colors)], colors[i%len(colors)]
		sc.Shape = draw.CircleGlyph{}
		p.Add(l, sc)
		p.Legend.Add(s.Name, l, sc)
	}
	p.Y.Max = top * 8 // room for the legend above the lines
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("scale: plot: %w", err)
	}
	return nil
}

package sharedstate

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestMarkdownLinks checks every relative link of every Markdown file in
// the repository: the file it names exists, and so does the heading its
// #anchor names (GitHub's anchors: the heading in lower case, without
// punctuation, spaces as hyphens, "-1", "-2"… for repeats).
func TestMarkdownLinks(t *testing.T) {
	const root = ".."
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		seen := map[string]int{}
		for _, line := range markdownLines(string(text)) {
			h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
			if !ok || !strings.HasPrefix(line, "#") {
				continue
			}
			slug := headingAnchor(h)
			if n := seen[slug]; n > 0 {
				a[slug+"-"+strconv.Itoa(n)] = true
			} else {
				a[slug] = true
			}
			seen[slug]++
		}
		anchors[path] = a
		return a, nil
	}

	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".tools", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		files++
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for n, line := range markdownLines(string(text)) {
			for _, m := range link.FindAllStringSubmatch(stripInlineCode(line), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %s: no such file %s", path, n+1, target, dest)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", path, n+1, target)
					continue
				}
				a, err := anchorsOf(filepath.Clean(dest))
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", path, n+1, target, err)
				} else if !a[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", path, n+1, target, dest, anchor)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("found %d Markdown files under %s; the folder READMEs are missing", files, root)
	}
}

// markdownLines returns the lines of a Markdown text, those inside fenced
// code blocks blanked (they hold no links or headings).
func markdownLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			lines[i] = ""
		} else if fence {
			lines[i] = ""
		}
	}
	return lines
}

// stripInlineCode removes `code spans`, which hold no links.
func stripInlineCode(line string) string {
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "")
}

// headingAnchor is GitHub's anchor of a heading's text.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

package protocol

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// releaseDescriptor is the descriptor set of the last release's .proto,
// written by protoc from the release tag (protocol/README.md, "Versions and compatibility":
// cutting a release).
const releaseDescriptor = "testdata/fusebox-v0.1.0.binpb"

func loadRelease(t *testing.T) *descriptorpb.FileDescriptorProto {
	t.Helper()
	data, err := os.ReadFile(releaseDescriptor)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		t.Fatalf("%s: %v", releaseDescriptor, err)
	}
	for _, f := range set.GetFile() {
		if f.GetName() == "fusebox/v1/fusebox.proto" {
			return f
		}
	}
	t.Fatalf("%s holds no fusebox/v1/fusebox.proto", releaseDescriptor)
	return nil
}

func current() *descriptorpb.FileDescriptorProto {
	return protodesc.ToFileDescriptorProto(fuseboxv1.File_fusebox_v1_fusebox_proto)
}

// TestWireCompatibility compares the .proto this build was generated from
// with the last release's: a field number never changes its name, type or
// cardinality, and a removed one is reserved (number and name), as is a
// removed enum value. Adding fields and messages is free.
func TestWireCompatibility(t *testing.T) {
	for _, p := range compatProblems(loadRelease(t), current()) {
		t.Error(p)
	}
}

// The check finds what it must: a reused number (the change that made
// 0.1.0's rows misread by the build before it), a retyped field, a removed
// field that is not reserved, a removed enum value, and a new field on a
// reserved number.
func TestWireCompatibilityCatches(t *testing.T) {
	base := current()
	msg := func(f *descriptorpb.FileDescriptorProto, name string) *descriptorpb.DescriptorProto {
		for _, m := range f.GetMessageType() {
			if m.GetName() == name {
				return m
			}
		}
		t.Fatalf("no message %s", name)
		return nil
	}
	field := func(m *descriptorpb.DescriptorProto, n int32) *descriptorpb.FieldDescriptorProto {
		for _, f := range m.GetField() {
			if f.GetNumber() == n {
				return f
			}
		}
		t.Fatalf("no field %d in %s", n, m.GetName())
		return nil
	}
	cases := []struct {
		name   string
		mutate func(f *descriptorpb.FileDescriptorProto)
		want   string
	}{
		{"renamed field (number reused)", func(f *descriptorpb.FileDescriptorProto) {
			field(msg(f, "NodeWindow"), 8).Name = proto.String("recent")
		}, "NodeWindow field 8"},
		{"retyped field", func(f *descriptorpb.FileDescriptorProto) {
			field(msg(f, "BreakerRecord"), 2).Type = descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
		}, "BreakerRecord field 2"},
		{"cardinality", func(f *descriptorpb.FileDescriptorProto) {
			field(msg(f, "GossipBatch"), 1).Label = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
		}, "GossipBatch field 1"},
		{"removed, not reserved", func(f *descriptorpb.FileDescriptorProto) {
			m := msg(f, "NodeWindow")
			m.Field = slices.DeleteFunc(m.Field, func(x *descriptorpb.FieldDescriptorProto) bool { return x.GetNumber() == 27 })
		}, "NodeWindow field 27 (in_flight) was removed"},
		{"removed and reserved", func(f *descriptorpb.FileDescriptorProto) {
			m := msg(f, "NodeWindow")
			m.Field = slices.DeleteFunc(m.Field, func(x *descriptorpb.FieldDescriptorProto) bool { return x.GetNumber() == 27 })
			m.ReservedRange = append(m.ReservedRange, &descriptorpb.DescriptorProto_ReservedRange{Start: proto.Int32(27), End: proto.Int32(28)})
			m.ReservedName = append(m.ReservedName, "in_flight")
		}, ""},
		{"removed enum value", func(f *descriptorpb.FileDescriptorProto) {
			e := f.GetEnumType()[0]
			e.Value = e.Value[:len(e.Value)-1]
		}, "was removed"},
		{"new field on a reserved number", func(f *descriptorpb.FileDescriptorProto) {
			m := msg(f, "GossipBatch")
			m.ReservedRange = append(m.ReservedRange, &descriptorpb.DescriptorProto_ReservedRange{Start: proto.Int32(40), End: proto.Int32(41)})
			m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String("x"), Number: proto.Int32(40),
				Type: descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()})
		}, "reserved"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := proto.Clone(base).(*descriptorpb.FileDescriptorProto)
			changed := proto.Clone(base).(*descriptorpb.FileDescriptorProto)
			c.mutate(changed)
			if c.name == "new field on a reserved number" {
				old = proto.Clone(changed).(*descriptorpb.FileDescriptorProto)
				m := msg(old, "GossipBatch")
				m.Field = m.Field[:len(m.Field)-1]
			}
			got := strings.Join(compatProblems(old, changed), "\n")
			if c.want == "" && got != "" {
				t.Fatalf("want no problem, got\n%s", got)
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("want a problem naming %q, got\n%s", c.want, got)
			}
		})
	}
}

// compatProblems lists every way cur breaks what old said on the wire.
func compatProblems(old, cur *descriptorpb.FileDescriptorProto) []string {
	var out []string
	curMsgs := map[string]*descriptorpb.DescriptorProto{}
	curEnums := map[string]*descriptorpb.EnumDescriptorProto{}
	var index func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto)
	index = func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto) {
		for _, m := range ms {
			curMsgs[prefix+m.GetName()] = m
			index(prefix+m.GetName()+".", m.GetNestedType(), m.GetEnumType())
		}
		for _, e := range es {
			curEnums[prefix+e.GetName()] = e
		}
	}
	index("", cur.GetMessageType(), cur.GetEnumType())

	var walk func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto)
	walk = func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto) {
		for _, om := range ms {
			name := prefix + om.GetName()
			nm, ok := curMsgs[name]
			if !ok {
				out = append(out, fmt.Sprintf("message %s was removed", name))
				continue
			}
			out = append(out, messageProblems(name, om, nm)...)
			walk(name+".", om.GetNestedType(), om.GetEnumType())
		}
		for _, oe := range es {
			name := prefix + oe.GetName()
			ne, ok := curEnums[name]
			if !ok {
				out = append(out, fmt.Sprintf("enum %s was removed", name))
				continue
			}
			out = append(out, enumProblems(name, oe, ne)...)
		}
	}
	walk("", old.GetMessageType(), old.GetEnumType())
	return out
}

func messageProblems(name string, old, cur *descriptorpb.DescriptorProto) []string {
	var out []string
	curByNum := map[int32]*descriptorpb.FieldDescriptorProto{}
	curByName := map[string]*descriptorpb.FieldDescriptorProto{}
	for _, f := range cur.GetField() {
		curByNum[f.GetNumber()] = f
		curByName[f.GetName()] = f
	}
	reserved := func(n int32) bool {
		for _, r := range cur.GetReservedRange() {
			if n >= r.GetStart() && n < r.GetEnd() { // End is exclusive in descriptors
				return true
			}
		}
		return false
	}
	for _, of := range old.GetField() {
		n := of.GetNumber()
		nf, ok := curByNum[n]
		if !ok {
			if !reserved(n) || !slices.Contains(cur.GetReservedName(), of.GetName()) {
				out = append(out, fmt.Sprintf("%s field %d (%s) was removed: add `reserved %d;` and `reserved %q;`", name, n, of.GetName(), n, of.GetName()))
			}
			continue
		}
		if d := fieldDiff(of, nf); d != "" {
			out = append(out, fmt.Sprintf("%s field %d changed meaning: %s (give the new meaning a new number, reserve this one, and bump the gossip frame version if it travels in gossip)", name, n, d))
		}
	}
	for _, nf := range cur.GetField() {
		if reserved(nf.GetNumber()) {
			out = append(out, fmt.Sprintf("%s field %d (%s) uses a reserved number", name, nf.GetNumber(), nf.GetName()))
		}
		if slices.Contains(cur.GetReservedName(), nf.GetName()) {
			out = append(out, fmt.Sprintf("%s field %s uses a reserved name", name, nf.GetName()))
		}
	}
	for _, of := range old.GetField() {
		if nf, ok := curByName[of.GetName()]; ok && nf.GetNumber() != of.GetNumber() {
			out = append(out, fmt.Sprintf("%s field %s moved from %d to %d (JSON and text formats read it by name)", name, of.GetName(), of.GetNumber(), nf.GetNumber()))
		}
	}
	return out
}

func fieldDiff(a, b *descriptorpb.FieldDescriptorProto) string {
	var d []string
	if a.GetName() != b.GetName() {
		d = append(d, fmt.Sprintf("name %s -> %s", a.GetName(), b.GetName()))
	}
	if a.GetType() != b.GetType() {
		d = append(d, fmt.Sprintf("type %s -> %s", a.GetType(), b.GetType()))
	}
	if a.GetTypeName() != b.GetTypeName() {
		d = append(d, fmt.Sprintf("type %s -> %s", a.GetTypeName(), b.GetTypeName()))
	}
	if a.GetLabel() != b.GetLabel() {
		d = append(d, fmt.Sprintf("cardinality %s -> %s", a.GetLabel(), b.GetLabel()))
	}
	if a.GetProto3Optional() != b.GetProto3Optional() {
		d = append(d, fmt.Sprintf("optional %v -> %v", a.GetProto3Optional(), b.GetProto3Optional()))
	}
	if (a.OneofIndex == nil) != (b.OneofIndex == nil) {
		d = append(d, "moved into or out of a oneof")
	}
	return strings.Join(d, ", ")
}

func enumProblems(name string, old, cur *descriptorpb.EnumDescriptorProto) []string {
	var out []string
	byNum := map[int32]string{}
	for _, v := range cur.GetValue() {
		byNum[v.GetNumber()] = v.GetName()
	}
	reserved := func(n int32) bool {
		for _, r := range cur.GetReservedRange() {
			if n >= r.GetStart() && n <= r.GetEnd() { // End is inclusive for enums
				return true
			}
		}
		return false
	}
	for _, ov := range old.GetValue() {
		n := ov.GetNumber()
		nn, ok := byNum[n]
		switch {
		case !ok && !reserved(n):
			out = append(out, fmt.Sprintf("enum %s value %d (%s) was removed: reserve it", name, n, ov.GetName()))
		case ok && nn != ov.GetName():
			out = append(out, fmt.Sprintf("enum %s value %d changed meaning: %s -> %s", name, n, ov.GetName(), nn))
		}
	}
	return out
}

package sharedstate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A policy document is read over a copy of a complete policy (the fleet
// default in force, for a dependency's document): each field the document
// sets replaces the copy's, and every field it leaves out keeps the copy's
// value. Reading collects every problem with its JSON path — wrong types,
// bad durations, unknown fields — instead of stopping at the first, so that
// one refusal names all of them ("breaker.window: invalid duration \"abc\"",
// "retry.maxAttempts: must be an integer, got \"3\""). Only JSON that is not
// well-formed, and trailing data, stop reading. Which fields a document sets
// is the set of JSON paths it holds (not null); the Policy struct's JSON
// tags are the only description of the document.

// maxShownValue caps how much of a refused value a violation quotes.
const maxShownValue = 64

// DecodePolicy reads the policy document data over a copy of base: every
// field the document sets replaces base's (a null sets nothing), the others
// keep base's value, and "schema" is 1 in the result. It refuses unknown
// fields (names are case-sensitive), wrong types, numbers where durations
// belong and a schema other than 1, every one named by its JSON path in one
// *ValidationError; JSON that is not well-formed (with its line and column)
// and trailing data are refused with an error matching ErrInvalidPolicy.
// Values are not range-checked: Validate the result, or use ParsePolicyOver.
func DecodePolicy(base Policy, data []byte) (Policy, error) {
	p, _, err := decodeStrict(base, data)
	return p, err
}

// ParsePolicyOver reads a dependency's policy document over def, the fleet
// default in force, and validates the result, the policy the agents
// enforce: every problem, decoding and rules, in one *ValidationError. With
// a name, the result's Dependency is name, and a "dependency" field naming
// another is refused (PolicyNameViolation).
func ParsePolicyOver(def Policy, name string, data []byte) (Policy, error) {
	p, set, vs, err := decodePolicy(def, data)
	if err != nil {
		return Policy{}, err
	}
	if v := PolicyNameViolation(name, p.Dependency); v != nil && set["dependency"] {
		vs = append(vs, *v)
	}
	if name != "" {
		p.Dependency = name
	}
	if all := mergeViolations(vs, p.validate()); len(all) > 0 {
		return Policy{}, &ValidationError{Violations: all}
	}
	return p, nil
}

// ParsePolicy reads a complete policy (such as policies/_default) as
// DecodePolicy does, requires every field to be present but the optional
// ones (tagged policy:"optional" in Policy: "schema", which is 1, and the
// fields added since schema 1 was first written, which get DefaultPolicy's
// values) and validates it. Errors match ErrInvalidPolicy; a
// *ValidationError names every field that does not decode, is missing or
// is invalid.
func ParsePolicy(data []byte) (Policy, error) {
	p, _, err := parseComplete(data)
	return p, err
}

// parseComplete is ParsePolicy, also returning the paths the document sets.
func parseComplete(data []byte) (Policy, map[string]bool, error) {
	base := DefaultPolicy()
	b := reflect.ValueOf(&base).Elem()
	for _, f := range policyPaths {
		if !f.section && !f.optional {
			b.FieldByIndex(f.index).SetZero() // missing: reported below, and zero as before
		}
	}
	p, set, vs, err := decodePolicy(base, data)
	if err != nil {
		return Policy{}, nil, err
	}
	for _, f := range policyPaths {
		if !f.section && !f.optional && !set[f.path] && !aboutField(vs, f.path) {
			vs = append(vs, Violation{Field: f.path, Message: "is required"})
		}
	}
	// A missing field also fails its rule; report it once, as missing.
	if all := mergeViolations(vs, p.validate()); len(all) > 0 {
		return Policy{}, nil, &ValidationError{Violations: all}
	}
	return p, set, nil
}

// PolicyDocument returns the policy document data as it is stored under
// policies/<name>: "schema": 1 and "dependency": name, then the fields data
// sets, in the order of a policy's fields, each value as Go writes it
// ("2m0s" for "2m"), nulls left out. data must decode (DecodePolicy).
func PolicyDocument(name string, data []byte) ([]byte, error) {
	p, set, err := decodeStrict(Policy{}, data)
	if err != nil {
		return nil, err
	}
	p.Dependency = name
	set["schema"], set["dependency"] = true, true
	return appendMembers(nil, reflect.ValueOf(p), "", set), nil
}

// appendMembers appends, as one JSON object, the members of v (a Policy, or
// its section at prefix) that set holds; a section with none is left out.
func appendMembers(b []byte, v reflect.Value, prefix string, set map[string]bool) []byte {
	b = append(b, '{')
	n := len(b)
	for i := range v.NumField() {
		name := jsonName(v.Type().Field(i))
		var val []byte
		switch path := prefix + name; {
		case policyIndex[path].section:
			if val = appendMembers(nil, v.Field(i), path+".", set); len(val) == 2 {
				continue
			}
		case set[path]:
			val, _ = json.Marshal(v.Field(i).Interface()) // a policy's leaves always marshal
		default:
			continue
		}
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(strconv.AppendQuote(b, name), ':')
		b = append(b, val...)
	}
	return append(b, '}')
}

// policyPath is one member of a policy document.
type policyPath struct {
	path     string // dotted JSON path, e.g. "breaker.window"
	index    []int  // of its field in Policy, for reflect.Value.FieldByIndex
	rank     int    // its position in policyPaths
	section  bool   // an object of further members ("breaker", "retry.backoff")
	optional bool   // tagged policy:"optional", or in a section so tagged
}

// policyPaths lists every member of a policy document, each section before
// its members, in the order of the Policy struct, derived from its JSON
// tags; policyIndex finds one by path.
var policyPaths = pathsOf(reflect.TypeOf(Policy{}), "", nil, false)

var policyIndex = func() map[string]*policyPath {
	m := map[string]*policyPath{}
	for i := range policyPaths {
		policyPaths[i].rank = i
		m[policyPaths[i].path] = &policyPaths[i]
	}
	return m
}()

func pathsOf(t reflect.Type, prefix string, index []int, optional bool) []policyPath {
	var out []policyPath
	for i := range t.NumField() {
		f := t.Field(i)
		p := policyPath{path: prefix + jsonName(f), index: append(slices.Clone(index), i),
			section: f.Type.Kind() == reflect.Struct, optional: optional || f.Tag.Get("policy") == "optional"}
		out = append(out, p)
		if p.section {
			out = append(out, pathsOf(f.Type, p.path+".", p.index, p.optional)...)
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// fieldRank orders violations as the fields are ordered in a policy
// (schema, dependency, then the sections' members); unknown paths last.
func fieldRank(path string) int {
	if path == "" {
		return -1
	}
	if f, ok := policyIndex[path]; ok {
		return f.rank
	}
	return len(policyPaths)
}

// comparePaths orders JSON paths as the fields are ordered in a policy
// (fieldRank), then by path.
func comparePaths(a, b string) int {
	return cmp.Or(cmp.Compare(fieldRank(a), fieldRank(b)), strings.Compare(a, b))
}

// sortViolations orders vs by field (stable: a field's violations keep their order).
func sortViolations(vs []Violation) {
	slices.SortStableFunc(vs, func(a, b Violation) int { return comparePaths(a.Field, b.Field) })
}

// decodeStrict is decodePolicy with the decoding problems as a
// *ValidationError.
func decodeStrict(base Policy, data []byte) (Policy, map[string]bool, error) {
	p, set, vs, err := decodePolicy(base, data)
	if err == nil && len(vs) > 0 {
		err = &ValidationError{Violations: vs}
	}
	if err != nil {
		return Policy{}, nil, err
	}
	return p, set, nil
}

// decodePolicy reads data over a copy of base and returns the result, the
// paths of the fields data sets, and the problems of those that did not
// decode (they keep base's value). err is non-nil only when data is not one
// well-formed JSON object. "dependency": "" sets nothing.
func decodePolicy(base Policy, data []byte) (Policy, map[string]bool, []Violation, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Policy{}, nil, nil, fmt.Errorf("%w: not a JSON document: %s", ErrInvalidPolicy, syntaxProblem(data, err))
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, end+int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n"))))
		return Policy{}, nil, nil, fmt.Errorf("%w: trailing data after the policy object at line %d, column %d", ErrInvalidPolicy, line, col)
	}
	obj, v := decodeObject("", raw)
	if v != nil {
		return Policy{}, nil, nil, fmt.Errorf("%w: the policy %s, got %s", ErrInvalidPolicy, v.Message, v.Value)
	}
	p, set := base, map[string]bool{}
	vs := decodeMembers(reflect.ValueOf(&p).Elem(), "", obj, set, nil)
	if set["schema"] && p.Schema != PolicySchema {
		vs = append(vs, Violation{Field: "schema", Value: strconv.Itoa(p.Schema), Message: "must be 1"})
	}
	p.Schema = PolicySchema
	if p.Dependency == "" {
		p.Dependency = base.Dependency
		delete(set, "dependency")
	}
	sortViolations(vs)
	return p, set, vs, nil
}

// decodeMembers decodes the members of the object at prefix into the
// Policy v, adding the path of each field set to set.
func decodeMembers(v reflect.Value, prefix string, obj map[string]json.RawMessage, set map[string]bool, vs []Violation) []Violation {
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		path, raw := prefix+key, obj[key]
		f, ok := policyIndex[path]
		switch {
		case !ok:
			vs = append(vs, unknownField(path))
		case isNull(raw): // sets nothing
		case f.section:
			members, bad := decodeObject(path, raw)
			if bad != nil {
				vs = append(vs, *bad)
				continue
			}
			vs = decodeMembers(v, path+".", members, set, vs)
		default:
			dst := v.FieldByIndex(f.index).Addr().Interface()
			if err := json.Unmarshal(raw, dst); err != nil {
				vs = append(vs, *decodeViolation(path, raw, dst, err))
				continue
			}
			set[path] = true
		}
	}
	return vs
}

// syntaxProblem says where and why data is not one well-formed JSON value,
// e.g. "line 3, column 14: invalid character '}' looking for beginning of
// object key string".
func syntaxProblem(data []byte, err error) string {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		line, col := position(data, max(se.Offset-1, 0)) // Offset is just past the offending byte
		return fmt.Sprintf("line %d, column %d: %v", line, col, se)
	case errors.Is(err, io.EOF):
		return "the document is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(data, int64(len(bytes.TrimRight(data, " \t\r\n"))))
		return fmt.Sprintf("line %d, column %d: the document ends before its JSON value does (a missing \"}\", \"]\" or quote?)", line, col)
	}
	return err.Error()
}

// position returns the 1-based line and column (in characters) of the byte
// at offset off of data.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

// unknownField names a field the policy does not have, suggesting the field
// that differs only in case (JSON field names are case-sensitive here).
func unknownField(path string) Violation {
	v := Violation{Field: path, Message: "unknown field"}
	for _, f := range policyPaths {
		if strings.EqualFold(f.path, path) {
			v.Message = "unknown field (did you mean " + strconv.Quote(f.path) + "?)"
			break
		}
	}
	return v
}

// decodeObject decodes raw as a JSON object; path "" is the document itself.
func decodeObject(path string, raw json.RawMessage) (map[string]json.RawMessage, *Violation) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, &Violation{Field: path, Value: showValue(raw), Message: "must be a JSON object"}
	}
	return obj, nil
}

// decodeViolation turns the error of decoding raw into dst into a violation of path.
func decodeViolation(path string, raw json.RawMessage, dst any, err error) *Violation {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &Violation{Field: path, Value: showValue(raw), Message: "must be " + describeType(dst)}
	}
	return &Violation{Field: path, Message: err.Error()}
}

// describeType says what JSON value decodes into *dst, a policy's leaf.
func describeType(dst any) string {
	if _, ok := dst.(*Duration); ok {
		return `a duration string such as "500ms" or "2m"`
	}
	switch t := reflect.TypeOf(dst).Elem(); t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	default:
		return "a " + t.String()
	}
}

// showValue quotes a refused JSON value, compacted and cut to maxShownValue bytes.
func showValue(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	if len(s) > maxShownValue {
		s = s[:maxShownValue] + "…"
	}
	return s
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// mergeViolations returns the decoding problems followed by the rule
// violations of fields that decoded (a field that did not decode also fails
// its rule, with a meaningless value: it is reported once), in field order.
func mergeViolations(decode, rules []Violation) []Violation {
	all := slices.Clone(decode)
	for _, v := range rules {
		if !aboutField(decode, v.Field) {
			all = append(all, v)
		}
	}
	sortViolations(all)
	return all
}

// aboutField reports whether one of vs is a violation of field.
func aboutField(vs []Violation, field string) bool {
	return slices.ContainsFunc(vs, func(v Violation) bool { return v.Field == field })
}

// JoinViolations returns one *ValidationError (of a's kind) with a's
// violations and those of b on fields a does not name, in field order.
func JoinViolations(a, b *ValidationError) *ValidationError {
	return &ValidationError{Violations: mergeViolations(a.Violations, b.Violations), kind: a.kind}
}

package sharedstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decoding a policy document collects every problem with its JSON path —
// wrong types, bad durations, unknown fields — instead of stopping at the
// first, so that one refusal names all of them ("breaker.window: invalid
// duration \"abc\"", "retry.maxAttempts: must be an integer, got \"3\"").
// Only JSON that is not well-formed, and trailing data, stop decoding.

// maxShownValue caps how much of a refused value a violation quotes.
const maxShownValue = 64

// policySections are the JSON paths of the objects that hold policy fields
// ("breaker", "retry", "retry.backoff", ...), derived from policyFields.
var policySections = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range policyFields {
		parts := strings.Split(f.path, ".")
		for i := 1; i < len(parts); i++ {
			m[strings.Join(parts[:i], ".")] = true
		}
	}
	return m
}()

// policyFieldIndex maps a leaf's JSON path to its policyField.
var policyFieldIndex = func() map[string]*policyField {
	m := map[string]*policyField{}
	for i := range policyFields {
		m[policyFields[i].path] = &policyFields[i]
	}
	return m
}()

// fieldRank orders violations as the fields are ordered in a policy:
// schema, dependency, then policyFields; unknown paths last.
func fieldRank(path string) int {
	switch path {
	case "":
		return -1
	case "schema":
		return 0
	case "dependency":
		return 1
	}
	for i, f := range policyFields {
		if f.path == path || strings.HasPrefix(f.path, path+".") {
			return i + 2
		}
	}
	return len(policyFields) + 2
}

// sortViolations orders vs by field (stable: a field's violations keep their order).
func sortViolations(vs []Violation) {
	slices.SortStableFunc(vs, func(a, b Violation) int {
		if ra, rb := fieldRank(a.Field), fieldRank(b.Field); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Field, b.Field)
	})
}

// decodePolicyPatch decodes data into a patch holding every field that
// decoded, and lists the problems of the others. err is non-nil only when
// data is not one well-formed JSON value.
func decodePolicyPatch(data []byte) (PolicyPatch, []Violation, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return PolicyPatch{}, nil, fmt.Errorf("%w: not a JSON document: %s", ErrInvalidPolicy, syntaxProblem(data, err))
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, end+int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n"))))
		return PolicyPatch{}, nil, fmt.Errorf("%w: trailing data after the policy object at line %d, column %d", ErrInvalidPolicy, line, col)
	}
	var p PolicyPatch
	var vs []Violation
	obj, v := decodeObject("", raw)
	if v != nil {
		return PolicyPatch{}, nil, fmt.Errorf("%w: the policy %s, got %s", ErrInvalidPolicy, v.Message, v.Value)
	}
	for _, key := range sortedKeys(obj) {
		val := obj[key]
		switch key {
		case "schema":
			if isNull(val) {
				continue
			}
			var n int
			if err := json.Unmarshal(val, &n); err != nil {
				vs = append(vs, *decodeViolation("schema", val, &n, err))
				continue
			}
			if n != PolicySchema {
				vs = append(vs, Violation{Field: "schema", Value: strconv.Itoa(n), Message: "must be 1"})
				continue
			}
			p.Schema = &n
		case "dependency":
			if isNull(val) {
				continue
			}
			if err := json.Unmarshal(val, &p.Dependency); err != nil {
				vs = append(vs, *decodeViolation("dependency", val, &p.Dependency, err))
			}
		default:
			vs = decodeMember(&p, key, val, vs)
		}
	}
	sortViolations(vs)
	return p, vs, nil
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

// decodeMember decodes the member of a policy object at path.
func decodeMember(p *PolicyPatch, path string, val json.RawMessage, vs []Violation) []Violation {
	if f, ok := policyFieldIndex[path]; ok {
		if isNull(val) {
			return vs
		}
		if v := f.decode(p, val); v != nil {
			vs = append(vs, *v)
		}
		return vs
	}
	if policySections[path] {
		if isNull(val) {
			return vs
		}
		obj, v := decodeObject(path, val)
		if v != nil {
			return append(vs, *v)
		}
		for _, key := range sortedKeys(obj) {
			vs = decodeMember(p, path+"."+key, obj[key], vs)
		}
		return vs
	}
	return append(vs, unknownField(path))
}

// unknownField names a field the policy does not have, suggesting the field
// that differs only in case (JSON field names are case-sensitive here).
func unknownField(path string) Violation {
	v := Violation{Field: path, Message: "unknown field"}
	candidates := []string{"schema", "dependency"}
	for _, f := range policyFields {
		candidates = append(candidates, f.path)
	}
	for s := range policySections {
		candidates = append(candidates, s)
	}
	slices.Sort(candidates)
	for _, c := range candidates {
		if strings.EqualFold(c, path) {
			v.Message = "unknown field (did you mean " + strconv.Quote(c) + "?)"
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

// describeType says what JSON value decodes into *dst.
func describeType(dst any) string {
	if _, ok := dst.(*Duration); ok {
		return `a duration string such as "500ms" or "2m"`
	}
	t := reflect.TypeOf(dst).Elem()
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	}
	return "a " + t.String()
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

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mergeViolations returns the decoding problems followed by the rule
// violations of fields that decoded (a field that did not decode also fails
// its rule, with a meaningless value: it is reported once), in field order.
func mergeViolations(decode, rules []Violation) []Violation {
	bad := map[string]bool{}
	for _, v := range decode {
		bad[v.Field] = true
	}
	all := slices.Clone(decode)
	for _, v := range rules {
		if !bad[v.Field] {
			all = append(all, v)
		}
	}
	sortViolations(all)
	return all
}

// ParsePolicyPatchOver decodes data as ParsePolicyPatch does and validates the
// policy it yields over def (with Dependency set to name unless name is
// empty), reporting every problem — decoding and rules — in one
// *ValidationError. It returns the patch and the merged policy.
func ParsePolicyPatchOver(def Policy, name string, data []byte) (PolicyPatch, Policy, error) {
	patch, decodeVs, err := decodePolicyPatch(data)
	if err != nil {
		return PolicyPatch{}, Policy{}, err
	}
	p := MergePolicy(def, patch)
	if name != "" {
		p.Dependency = name
	}
	if all := mergeViolations(decodeVs, p.validate()); len(all) > 0 {
		return PolicyPatch{}, Policy{}, &ValidationError{Violations: all}
	}
	return patch, p, nil
}

// JoinViolations returns one *ValidationError (of a's kind) with a's
// violations and those of b on fields a does not name, in field order.
func JoinViolations(a, b *ValidationError) *ValidationError {
	return &ValidationError{Violations: mergeViolations(a.Violations, b.Violations), kind: a.kind}
}

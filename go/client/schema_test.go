package katamem

// The structs against the shipped JSON Schemas (kata_mem/schemas), field by field:
// every property is a field and every field a property, of a Go type that holds
// every value the schema allows (null only in a pointer, slice or map), and
// omitempty exactly where the schema does not require the property (so that a
// zero value is never sent for a property the request leaves out).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// aheadOfSchema: fields modelled before the schema has them (the lead reconciles
// the schema when the branches merge). Checked as any other once the schema has them.
var aheadOfSchema = map[string]bool{
	"ShimResponse.cri": true, // issue 17 §2: the update-sandbox answer
}

type schemaChecker struct {
	root     map[string]interface{}
	problems []string
}

func loadSchema(t *testing.T, name string) map[string]interface{} {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "kata_mem", "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc map[string]interface{}
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return doc
}

func (c *schemaChecker) fail(at, format string, args ...interface{}) {
	c.problems = append(c.problems, at+": "+fmt.Sprintf(format, args...))
}

func (c *schemaChecker) resolve(s map[string]interface{}) map[string]interface{} {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		node := interface{}(c.root)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			node = node.(map[string]interface{})[part]
		}
		s = node.(map[string]interface{})
	}
}

func isNull(s map[string]interface{}) bool {
	return s["type"] == "null"
}

// branches splits a schema into its non-null alternatives and whether null is one.
func (c *schemaChecker) branches(s map[string]interface{}) ([]map[string]interface{}, bool) {
	s = c.resolve(s)
	alts, ok := s["oneOf"].([]interface{})
	if !ok {
		alts, ok = s["anyOf"].([]interface{})
	}
	if !ok {
		if types, ok := s["type"].([]interface{}); ok {
			var out []map[string]interface{}
			null := false
			for _, ty := range types {
				if ty == "null" {
					null = true
				} else {
					out = append(out, map[string]interface{}{"type": ty})
				}
			}
			return out, null
		}
		if isNull(s) {
			return nil, true
		}
		return []map[string]interface{}{s}, false
	}
	var out []map[string]interface{}
	null := false
	for _, alt := range alts {
		sub, subNull := c.branches(alt.(map[string]interface{}))
		null = null || subNull
		for _, b := range sub {
			if isNull(b) {
				null = true
			} else {
				out = append(out, b)
			}
		}
	}
	return out, null
}

// kind is the JSON type of a non-null schema: from "type", "const" or "enum".
func kind(s map[string]interface{}) string {
	if ty, ok := s["type"].(string); ok {
		return ty
	}
	value, ok := s["const"]
	if !ok {
		if enum, ok := s["enum"].([]interface{}); ok && len(enum) > 0 {
			value = enum[0]
		}
	}
	switch v := value.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		if strings.ContainsAny(v.String(), ".eE") {
			return "number"
		}
		return "integer"
	}
	if _, ok := s["properties"]; ok {
		return "object"
	}
	return ""
}

var nullable = map[reflect.Kind]bool{reflect.Ptr: true, reflect.Slice: true, reflect.Map: true}

// check compares the Go type with the schema; optional: the property is not required.
func (c *schemaChecker) check(at string, s map[string]interface{}, ty reflect.Type, optional bool) {
	alts, null := c.branches(s)
	if null && !nullable[ty.Kind()] {
		c.fail(at, "may be null: expected a pointer, slice or map, not %s", ty)
	}
	if ty.Kind() == reflect.Ptr {
		if !null && !optional {
			c.fail(at, "is required and never null: expected no pointer, not %s", ty)
		}
		ty = ty.Elem()
	}
	if len(alts) == 0 {
		return // always null
	}
	kinds := map[string]bool{}
	for _, alt := range alts {
		kinds[kind(alt)] = true
	}
	if len(kinds) != 1 {
		c.fail(at, "alternatives of more than one JSON type (%v): not modelled", kinds)
		return
	}
	switch k := kind(alts[0]); k {
	case "string":
		c.want(at, ty, reflect.String)
	case "boolean":
		c.want(at, ty, reflect.Bool)
	case "number":
		c.want(at, ty, reflect.Float64)
	case "integer":
		for _, alt := range alts {
			c.checkInteger(at, alt, ty)
		}
	case "array":
		if c.want(at, ty, reflect.Slice) {
			c.check(at+"[]", alts[0]["items"].(map[string]interface{}), ty.Elem(), false)
		}
	case "object":
		if ty.Kind() == reflect.Map {
			c.checkMap(at, alts, ty)
		} else if c.want(at, ty, reflect.Struct) {
			c.checkStruct(at, alts, ty)
		}
	default:
		c.fail(at, "schema of unknown type %q", k)
	}
}

func (c *schemaChecker) want(at string, ty reflect.Type, k reflect.Kind) bool {
	if ty.Kind() != k {
		c.fail(at, "expected a Go %s, not %s", k, ty)
		return false
	}
	return true
}

var intRange = map[reflect.Kind][2]*big.Int{}

func init() {
	one := big.NewInt(1)
	for k, bits := range map[reflect.Kind]uint{reflect.Int32: 32, reflect.Int64: 64, reflect.Int: 64} {
		hi := new(big.Int).Sub(new(big.Int).Lsh(one, bits-1), one)
		intRange[k] = [2]*big.Int{new(big.Int).Neg(new(big.Int).Add(hi, one)), hi}
	}
	for k, bits := range map[reflect.Kind]uint{reflect.Uint32: 32, reflect.Uint64: 64} {
		intRange[k] = [2]*big.Int{big.NewInt(0), new(big.Int).Sub(new(big.Int).Lsh(one, bits), one)}
	}
}

func number(v interface{}) *big.Int {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	i, ok := new(big.Int).SetString(n.String(), 10)
	if !ok {
		return nil
	}
	return i
}

// checkInteger: every value the schema allows fits the Go type. A bound the schema
// does not give is int64's (JSON numbers in kata-mem are 64-bit).
func (c *schemaChecker) checkInteger(at string, s map[string]interface{}, ty reflect.Type) {
	span, ok := intRange[ty.Kind()]
	if !ok {
		c.fail(at, "expected a Go integer type, not %s", ty)
		return
	}
	lo, hi := number(s["minimum"]), number(s["maximum"])
	if enum, ok := s["enum"].([]interface{}); ok {
		for _, v := range enum {
			n := number(v)
			if lo == nil || n.Cmp(lo) < 0 {
				lo = n
			}
			if hi == nil || n.Cmp(hi) > 0 {
				hi = n
			}
		}
	}
	if lo == nil {
		lo = intRange[reflect.Int64][0]
	}
	if hi == nil {
		hi = intRange[reflect.Int64][1]
	}
	if lo.Cmp(span[0]) < 0 || hi.Cmp(span[1]) > 0 {
		c.fail(at, "holds %s..%s: %s does not", lo, hi, ty)
	}
}

func (c *schemaChecker) checkMap(at string, alts []map[string]interface{}, ty reflect.Type) {
	if ty.Key().Kind() != reflect.String {
		c.fail(at, "expected a map with string keys, not %s", ty)
	}
	for _, alt := range alts {
		extra, ok := alt["additionalProperties"].(map[string]interface{})
		if !ok {
			c.fail(at, "a map, but the schema does not allow any property name")
			continue
		}
		c.check(at+"[*]", extra, ty.Elem(), false)
		props, _ := alt["properties"].(map[string]interface{})
		for name, p := range props {
			c.check(at+"["+name+"]", p.(map[string]interface{}), ty.Elem(), false)
		}
	}
}

// checkStruct: the fields are the union of the alternatives' properties; one is
// required when every alternative requires it.
func (c *schemaChecker) checkStruct(at string, alts []map[string]interface{}, ty reflect.Type) {
	props := map[string][]map[string]interface{}{}
	required := map[string]int{}
	for _, alt := range alts {
		ps, _ := alt["properties"].(map[string]interface{})
		for name, p := range ps {
			props[name] = append(props[name], p.(map[string]interface{}))
		}
		reqs, _ := alt["required"].([]interface{})
		for _, r := range reqs {
			required[r.(string)]++
		}
	}
	fields := map[string]reflect.StructField{}
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "" || name == "-" {
			c.fail(at, "field %s has no JSON name", f.Name)
			continue
		}
		fields[name] = f
	}
	names := map[string]bool{}
	for name := range props {
		names[name] = true
	}
	for name := range fields {
		names[name] = true
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	for _, name := range sorted {
		where := ty.Name() + "." + name
		f, inGo := fields[name]
		schemas, inSchema := props[name]
		switch {
		case !inSchema && inGo && aheadOfSchema[where]:
			continue
		case !inSchema:
			c.fail(at, "field %s (%q) is not in the schema", f.Name, name)
			continue
		case !inGo:
			c.fail(at, "property %q has no field in %s", name, ty)
			continue
		}
		optional := required[name] < len(alts)
		if omit := strings.Contains(f.Tag.Get("json"), ",omitempty"); omit != optional {
			c.fail(at+"."+name, "required %v in the schema, but omitempty %v", !optional, omit)
		}
		alternatives := make([]interface{}, len(schemas))
		for i, s := range schemas {
			alternatives[i] = s
		}
		c.check(at+"."+name, map[string]interface{}{"oneOf": alternatives}, f.Type, optional)
	}
}

func checkAgainst(t *testing.T, file string, v interface{}) []string {
	c := &schemaChecker{root: loadSchema(t, file)}
	c.check(file, c.root, reflect.TypeOf(v), false)
	return c.problems
}

func TestTheRequestStructsMatchTheShippedSchema(t *testing.T) {
	for _, p := range checkAgainst(t, "shim-request.v1.json", ShimRequest{}) {
		t.Error(p)
	}
}

func TestTheResponseStructsMatchTheShippedSchema(t *testing.T) {
	for _, p := range checkAgainst(t, "shim-response.v1.json", ShimResponse{}) {
		t.Error(p)
	}
}

// Structs that drift from the schema, one way each: the check must name every one.
type driftedContainer struct {
	ID    string `json:"id"`
	State int    `json:"state,omitempty"` // an enum of strings
	Role  string `json:"role"`            // not required: needs omitempty
	// memory_limit_bytes, hugepages_limit_bytes, cpu_quota, cpu_period, cpuset: missing
	MemoryLimit int64 `json:"memory_limit,omitempty"` // no such property
}

type driftedRequest struct {
	Schema      string             `json:"schema"`
	SandboxID   string             `json:"sandbox_id"`
	Event       string             `json:"event"`
	Config      string             `json:"config,omitempty"` // may be null
	Containers  []driftedContainer `json:"containers,omitempty"`
	Backend     *Backend           `json:"backend,omitempty"`
	Apply       bool               `json:"apply,omitempty"`
	AllowShrink bool               `json:"allow_shrink,omitempty"`
	Host        *HostOverrides     `json:"host,omitempty"`
	Annotations map[string]int     `json:"annotations,omitempty"` // strings
}

func TestTheCheckNamesEveryDrift(t *testing.T) {
	got := strings.Join(checkAgainst(t, "shim-request.v1.json", driftedRequest{}), "\n")
	for _, want := range []string{
		".config: may be null",
		".containers[].state: expected a Go string, not int",
		".containers[].role: required false in the schema, but omitempty false",
		`property "cpuset" has no field`,
		`field MemoryLimit ("memory_limit") is not in the schema`,
		".annotations[*]: expected a Go string, not int",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check does not say %q; it says:\n%s", want, got)
		}
	}
}

package sim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The schemas follow JSON Schema 2020-12 (json-schema.org/draft/2020-12:
// type, properties, required, additionalProperties, items, prefixItems,
// enum, const, anyOf, oneOf, allOf, $ref/$defs, minimum, exclusiveMinimum,
// multipleOf, minLength, maxLength, minItems, maxItems, format) as OpenAI's
// Structured Outputs guide (platform.openai.com/docs/guides/structured-outputs,
// "Supported schemas") and Ollama's docs/api.md ("Structured outputs")
// use them; generated values are checked with an independent validator
// (github.com/santhosh-tekuri/jsonschema/v6, formats asserted).

// validate fails unless instance satisfies schemaText.
func validate(t *testing.T, schemaText string, instance []byte) {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schemaText))
	if err != nil {
		t.Fatalf("schema %s: %v", schemaText, err)
	}
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("compile %s: %v", schemaText, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		t.Fatalf("generated %s is not JSON: %v", instance, err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("generated %s does not satisfy %s: %v", instance, schemaText, err)
	}
}

func TestSchemaGenerateSatisfies(t *testing.T) {
	schemas := []string{
		`{}`,
		`true`,
		`{"type":"string"}`,
		`{"type":"integer"}`,
		`{"type":"number"}`,
		`{"type":"boolean"}`,
		`{"type":"null"}`,
		`{"type":["null","integer"]}`,
		`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"array","items":{"type":"integer","minimum":10,"maximum":12}}}}}}`,
		`{"type":"integer","minimum":-5,"maximum":-5}`,
		`{"type":"integer","exclusiveMinimum":3,"exclusiveMaximum":5}`,
		`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`,
		`{"type":"number","minimum":0.25,"maximum":0.5}`,
		`{"type":"integer","multipleOf":7,"minimum":20}`,
		`{"type":"number","multipleOf":0.5,"maximum":-3}`,
		`{"type":"integer","minimum":1e15}`,
		`{"type":"string","minLength":40}`,
		`{"type":"string","maxLength":3}`,
		`{"type":"string","minLength":5,"maxLength":5}`,
		`{"type":"string","format":"date-time"}`,
		`{"type":"string","format":"date"}`,
		`{"type":"string","format":"email"}`,
		`{"type":"string","format":"uuid"}`,
		`{"type":"string","format":"ipv4"}`,
		`{"type":"string","format":"ipv6"}`,
		`{"type":"string","format":"uri"}`,
		`{"type":"array","items":{"type":"string"},"minItems":3,"maxItems":4}`,
		`{"type":"array","maxItems":0}`,
		`{"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}],"items":{"type":"null"},"minItems":3}`,
		`{"const":{"k":[1,2]}}`,
		`{"enum":["a",1,null,{"x":true}]}`,
		`{"anyOf":[{"type":"integer"},{"type":"string"}]}`,
		`{"oneOf":[{"type":"boolean"}]}`,
		`{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}`,
		`{"type":"object","required":["x","y"],"additionalProperties":{"type":"integer"}}`,
		`{"$defs":{"step":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},"required":["explanation","output"],"additionalProperties":false}},"type":"object","properties":{"steps":{"type":"array","items":{"$ref":"#/$defs/step"}},"final_answer":{"type":"string"}},"required":["steps","final_answer"],"additionalProperties":false}`,
		`{"definitions":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/definitions/node"}}},"required":["name","children"]}},"$ref":"#/definitions/node"}`,
		`{"type":"object","properties":{"a~b/c":{"$ref":"#/properties/x"},"x":{"type":"integer"}}}`,
	}
	for _, s := range schemas {
		doc, err := parseSchema(json.RawMessage(s))
		if err != nil {
			t.Errorf("parse %s: %v", s, err)
			continue
		}
		for seed := range 12 {
			out, err := doc.generate(seed)
			if err != nil {
				t.Errorf("generate %s (seed %d): %v", s, seed, err)
				continue
			}
			validate(t, s, out)
			again, _ := doc.generate(seed)
			if !bytes.Equal(out, again) {
				t.Errorf("generate %s not deterministic: %s then %s", s, out, again)
			}
		}
	}
}

func TestSchemaPropertyOrder(t *testing.T) {
	doc, err := parseSchema(json.RawMessage(`{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"},"mid":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := doc.generate(1)
	z, a, m := bytes.Index(out, []byte(`"zeta"`)), bytes.Index(out, []byte(`"alpha"`)), bytes.Index(out, []byte(`"mid"`))
	if !(z >= 0 && z < a && a < m) {
		t.Errorf("properties not in schema order: %s", out)
	}
}

func TestSchemaErrors(t *testing.T) {
	tests := []struct{ schema, want string }{
		{`[]`, "must be a JSON object or a boolean"},
		{`{"type":"text"}`, `unknown type "text"`},
		{`{"type":5}`, `"type" must be a string or an array of strings`},
		{`{"properties":{"a":{"type":"nope"}}}`, "schema at #/properties/a"},
		{`{"$ref":"https://example.com/s.json"}`, "is not local"},
		{`{"$ref":"#/$defs/missing"}`, "does not point into the schema"},
		{`{"enum":[]}`, `"enum" must be a non-empty array`},
		{`{"minItems":-1}`, `"minItems" must be a non-negative integer`},
		{`{"minLength":1e9}`, "generates at most"},
		{`{"multipleOf":0}`, `"multipleOf" must be a number above 0`},
		{`{"anyOf":[]}`, "a non-empty array of schemas"},
		{strings.Repeat(`{"items":`, 70) + `{}` + strings.Repeat(`}`, 70), "nests deeper than"},
	}
	for _, tt := range tests {
		_, err := parseSchema(json.RawMessage(tt.schema))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseSchema(%.60s) = %v, want error containing %q", tt.schema, err, tt.want)
		}
	}
	for _, s := range []string{
		`false`,
		`{"type":"object","properties":{"a":false},"required":["a"]}`,
		`{"$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}},"$ref":"#/$defs/n"}`,
		`{"type":"array","minItems":10000,"items":{"type":"array","minItems":10000}}`,
	} {
		doc, err := parseSchema(json.RawMessage(s))
		if err != nil {
			t.Errorf("parse %s: %v", s, err)
			continue
		}
		if out, err := doc.generate(0); err == nil {
			t.Errorf("generate %s = %.80s, want an error", s, out)
		}
	}
}

func TestSplitTokens(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`{"city":"the tide"}`, []string{`{`, `"`, `city`, `"`, `:`, `"`, `the`, ` tide`, `"`, `}`}},
		{`[1, 22,  x]`, []string{`[`, `1`, `,`, ` 22`, `,`, `  x`, `]`}},
		{`"潮水 a"`, []string{`"`, `潮水`, ` a`, `"`}},
		{`  `, []string{`  `}},
		{``, nil},
	}
	for _, tt := range tests {
		got := splitTokens(tt.in)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("splitTokens(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzSchema feeds arbitrary outside input to the schema reader: it must
// not panic, and what it accepts must generate (or refuse) deterministically
// a JSON value whose tokens add back up to it.
func FuzzSchema(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `[]`, `{"type":"object","properties":{"a":{"type":"string"}}}`,
		`{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`,
		`{"allOf":[{"$ref":"#"}]}`, `{"type":"integer","minimum":1e308,"multipleOf":1e-300}`,
		`{"items":[{"type":"integer"}],"minItems":2}`, `{"enum":[1,"a"]}`, `{"type":["null"]}`,
		`{"type":"string","maxLength":0,"minLength":3}`, `{"properties":{"a":{"$ref":"#/properties/a"}},"required":["a"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := parseSchema(raw)
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error")
			}
			return
		}
		out, err := doc.generate(3)
		if err != nil {
			return
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("generated invalid JSON %q from %q", out, raw)
		}
		if len(out) > maxSchemaOutput+64<<10 {
			t.Fatalf("generated %d bytes", len(out))
		}
		again, _ := doc.generate(3)
		if !bytes.Equal(out, again) {
			t.Fatalf("not deterministic")
		}
		if strings.Join(splitTokens(string(out)), "") != string(out) {
			t.Fatalf("tokens do not add up to %q", out)
		}
	})
}

// The validator the tests rely on does reject what a schema forbids.
func TestValidatorRejects(t *testing.T) {
	c := jsonschema.NewCompiler()
	doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"type":"object","properties":{"d":{"type":"integer","maximum":7}},"required":["d"]}`))
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"d":41}`, `{}`, `{"d":"x"}`, `[]`} {
		inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		if sch.Validate(inst) == nil {
			t.Errorf("%s passed", bad)
		}
	}
}

package api_test

// A reader of the OpenAPI document and a validator of responses against
// it, on the standard library. It knows exactly the part of OpenAPI 3.0
// that openapi.json uses and refuses to load a document that uses more (an
// unknown schema keyword, a response range, a header that is not a
// string), so the subset cannot grow unchecked. The document's validity as
// OpenAPI, and these verdicts against a reference implementation, are
// checked by internal/tests/api, which may depend on one.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// openapiDoc is what the tests read of the document.
type openapiDoc struct {
	// Paths maps a path template to its operations by lowercase method.
	Paths map[string]map[string]json.RawMessage `json:"paths"`
	// Components holds what $ref may name.
	Components struct {
		Schemas   map[string]*schema      `json:"schemas"`
		Responses map[string]*responseDef `json:"responses"`
	} `json:"components"`

	ops map[string]*operation // "METHOD /template" -> operation
}

// operation is one method of one path.
type operation struct {
	Responses map[string]*responseDef `json:"responses"`
	// Security is [] for a public operation, absent for one that needs a
	// token (the document's default).
	Security *[]json.RawMessage `json:"security"`
	Scope    string             `json:"x-required-scope"`
}

// responseDef is a documented response, or a $ref to one.
type responseDef struct {
	Ref         string                `json:"$ref"`
	Description string                `json:"description"`
	Headers     map[string]*headerDef `json:"headers"`
	Content     map[string]*mediaType `json:"content"`
}

type headerDef struct {
	Description string  `json:"description"`
	Required    bool    `json:"required"`
	Schema      *schema `json:"schema"`
}

type mediaType struct {
	Schema  *schema         `json:"schema"`
	Example json.RawMessage `json:"example"`
}

// schema is an OpenAPI 3.0 schema object, restricted to the keywords the
// document uses.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Nullable             bool               `json:"nullable"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties *additional        `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Enum                 []any              `json:"enum"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	MinLength            *int               `json:"minLength"`
	MaxLength            *int               `json:"maxLength"`
	MinItems             *int               `json:"minItems"`
	MaxItems             *int               `json:"maxItems"`
	Pattern              string             `json:"pattern"`
	Description          string             `json:"description"`
	Default              json.RawMessage    `json:"default"`
	// OneOf: the value validates against exactly one of these.
	OneOf []*schema `json:"oneOf"`
	// AllOf: the value validates against every one of these (the document
	// uses it to give a $ref a description, which a $ref's siblings
	// cannot).
	AllOf []*schema `json:"allOf"`

	re *regexp.Regexp // Pattern, compiled when the document is loaded
}

// additional is additionalProperties: true, false or a schema. Where the
// document says nothing the tests treat an object as closed, so that a
// field the document does not describe is an error.
type additional struct {
	allowed bool
	schema  *schema
}

// strict decodes b into v, refusing a field v does not name and reading
// numbers as json.Number.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}

func (s *schema) UnmarshalJSON(b []byte) error {
	type plain schema
	if err := strict(b, (*plain)(s)); err != nil {
		return fmt.Errorf("schema %s: %w", b, err)
	}
	return nil
}

func (r *responseDef) UnmarshalJSON(b []byte) error {
	type plain responseDef
	return strict(b, (*plain)(r))
}

func (h *headerDef) UnmarshalJSON(b []byte) error {
	type plain headerDef
	return strict(b, (*plain)(h))
}

func (m *mediaType) UnmarshalJSON(b []byte) error {
	type plain mediaType
	return strict(b, (*plain)(m))
}

func (a *additional) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &a.allowed); err == nil {
		return nil
	}
	a.allowed = true
	return json.Unmarshal(b, &a.schema)
}

// loadOpenAPI reads the document and checks that it stays within the
// subset validate understands.
func loadOpenAPI(data []byte) (*openapiDoc, error) {
	var doc openapiDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	doc.ops = map[string]*operation{}
	var errs []error
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options"}, method) {
				return nil, fmt.Errorf("%s: %q is not understood", path, method)
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			key := strings.ToUpper(method) + " " + path
			for code, r := range op.Responses {
				if _, err := strconv.Atoi(code); err != nil || len(code) != 3 {
					return nil, fmt.Errorf("%s: response %q: only exact status codes are understood", key, code)
				}
				errs = append(errs, doc.prepareResponse(r, key+" "+code))
			}
			doc.ops[key] = &op
		}
	}
	for name, s := range doc.Components.Schemas {
		errs = append(errs, doc.prepare(s, "#/components/schemas/"+name))
	}
	for name, r := range doc.Components.Responses {
		errs = append(errs, doc.prepareResponse(r, "#/components/responses/"+name))
	}
	return &doc, errors.Join(errs...)
}

// prepareResponse checks that r's reference resolves, or that its headers
// are strings and prepares its schemas.
func (d *openapiDoc) prepareResponse(r *responseDef, where string) error {
	if r.Ref != "" {
		if !reflect.DeepEqual(*r, responseDef{Ref: r.Ref}) {
			return fmt.Errorf("%s: a $ref with siblings", where)
		}
		_, err := d.response(r)
		return err
	}
	var errs []error
	for name, h := range r.Headers {
		if h.Schema == nil || !reflect.DeepEqual(*h.Schema, schema{Type: "string"}) {
			errs = append(errs, fmt.Errorf("%s: header %s: only plain string headers are understood", where, name))
		}
	}
	for mt, c := range r.Content {
		errs = append(errs, d.prepare(c.Schema, where+" "+mt))
	}
	return errors.Join(errs...)
}

// prepare compiles the patterns of s and the schemas below it, and checks
// that its references resolve, its type is known and a reference stands
// alone (OpenAPI 3.0 ignores a reference's siblings; a document that gives
// some is not saying what it means).
func (d *openapiDoc) prepare(s *schema, where string) error {
	if s == nil {
		return nil
	}
	if s.Ref != "" {
		if !reflect.DeepEqual(*s, schema{Ref: s.Ref}) {
			return fmt.Errorf("%s: a $ref with siblings", where)
		}
		if _, err := d.resolve(s.Ref); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		return nil
	}
	switch s.Type {
	case "", "string", "integer", "number", "boolean", "object", "array":
	default:
		return fmt.Errorf("%s: unknown type %q", where, s.Type)
	}
	if s.Nullable && s.Type == "" {
		// OpenAPI 3.0.3: nullable takes effect only beside a type; without
		// one, validators read the schema as they please (some as "anything",
		// which validates nothing). Any value is #/components/schemas/AnyValue.
		return fmt.Errorf("%s: nullable without a type", where)
	}
	switch s.Format {
	case "", "int64", "date-time":
	default:
		return fmt.Errorf("%s: format %q is not understood", where, s.Format)
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return fmt.Errorf("%s: pattern: %w", where, err)
		}
		s.re = re
	}
	errs := []error{d.prepare(s.Items, where+"/items")}
	for i, o := range s.OneOf {
		errs = append(errs, d.prepare(o, fmt.Sprintf("%s/oneOf/%d", where, i)))
	}
	for i, o := range s.AllOf {
		errs = append(errs, d.prepare(o, fmt.Sprintf("%s/allOf/%d", where, i)))
	}
	if s.AdditionalProperties != nil {
		errs = append(errs, d.prepare(s.AdditionalProperties.schema, where+"/additionalProperties"))
	}
	for name, p := range s.Properties {
		errs = append(errs, d.prepare(p, where+"/properties/"+name))
	}
	return errors.Join(errs...)
}

func (d *openapiDoc) resolve(ref string) (*schema, error) {
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if s := d.Components.Schemas[name]; ok && s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("unresolved $ref %q", ref)
}

// response follows r's $ref, if any.
func (d *openapiDoc) response(r *responseDef) (*responseDef, error) {
	if r.Ref == "" {
		return r, nil
	}
	name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
	if target := d.Components.Responses[name]; ok && target != nil {
		return target, nil
	}
	return nil, fmt.Errorf("unresolved $ref %q", r.Ref)
}

// route finds the operation for method and path: the template whose
// segments equal path's, a {param} standing for any non-empty segment. It
// returns "" when no template matches, or none with that method.
func (d *openapiDoc) route(method, path string) (string, *operation) {
	segs := strings.Split(path, "/")
	for key, op := range d.ops {
		m, tmpl, _ := strings.Cut(key, " ")
		if m != method {
			continue
		}
		t := strings.Split(tmpl, "/")
		if len(t) != len(segs) {
			continue
		}
		match := true
		for i := range t {
			param := strings.HasPrefix(t[i], "{") && strings.HasSuffix(t[i], "}")
			if (param && segs[i] == "") || (!param && t[i] != segs[i]) {
				match = false
				break
			}
		}
		if match {
			return tmpl, op
		}
	}
	return "", nil
}

// validateResponse checks one response of op: its status is documented,
// a documented required header is there, its Content-Type is one the
// status lists, and its body is valid against that media type's schema
// (the body of a text/plain media type is a string).
func (d *openapiDoc) validateResponse(op *operation, status int, header http.Header, body []byte) error {
	r, ok := op.Responses[strconv.Itoa(status)]
	if !ok {
		return fmt.Errorf("status %d is not documented for the operation", status)
	}
	r, err := d.response(r)
	if err != nil {
		return err
	}
	for name, h := range r.Headers {
		if h.Required && header.Get(name) == "" {
			return fmt.Errorf("header %s is required", name)
		}
	}
	if len(r.Content) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil {
		return fmt.Errorf("Content-Type %q: %w", header.Get("Content-Type"), err)
	}
	c, ok := r.Content[mt]
	if !ok {
		return fmt.Errorf("Content-Type %q is not one of the documented %v", mt, slices.Sorted(maps.Keys(r.Content)))
	}
	if c.Schema == nil {
		return nil
	}
	var v any
	switch mt {
	case "application/json":
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("body is not JSON: %w", err)
		}
	case "text/plain":
		v = string(body)
	default:
		return fmt.Errorf("no decoder for %s bodies", mt)
	}
	return d.validate(c.Schema, v, "body")
}

// validate checks the decoded JSON value v (numbers as json.Number)
// against s; at names where v is, for the error.
func (d *openapiDoc) validate(s *schema, v any, at string) error {
	if s.Ref != "" {
		target, err := d.resolve(s.Ref)
		if err != nil {
			return err
		}
		return d.validate(target, v, at)
	}
	if v == nil && s.Nullable {
		return nil
	}
	if v == nil && len(s.OneOf) == 0 && len(s.AllOf) == 0 {
		return fmt.Errorf("%s: null is not allowed", at)
	}
	for _, o := range s.AllOf {
		if err := d.validate(o, v, at); err != nil {
			return err
		}
	}
	if len(s.OneOf) > 0 {
		matched := 0
		for _, o := range s.OneOf {
			if d.validate(o, v, at) == nil {
				matched++
			}
		}
		if matched != 1 {
			return fmt.Errorf("%s: %v matches %d of the %d schemas of oneOf, not one", at, v, matched, len(s.OneOf))
		}
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, s.Enum)
	}
	switch s.Type {
	case "":
		return nil // any value
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", at, v)
		}
		return nil
	case "string":
		return s.validateString(v, at)
	case "integer", "number":
		return s.validateNumber(v, at)
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", at, v)
		}
		if (s.MinItems != nil && len(a) < *s.MinItems) || (s.MaxItems != nil && len(a) > *s.MaxItems) {
			return fmt.Errorf("%s: %d items is out of range", at, len(a))
		}
		for i, e := range a {
			if s.Items != nil {
				if err := d.validate(s.Items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
		return nil
	default: // object
		return d.validateObject(s, v, at)
	}
}

func (s *schema) validateString(v any, at string) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s: %v is not a string", at, v)
	}
	n := utf8.RuneCountInString(str)
	if (s.MinLength != nil && n < *s.MinLength) || (s.MaxLength != nil && n > *s.MaxLength) {
		return fmt.Errorf("%s: length %d is out of range", at, n)
	}
	if s.re != nil && !s.re.MatchString(str) {
		return fmt.Errorf("%s: %q does not match %s", at, str, s.Pattern)
	}
	if s.Format == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			return fmt.Errorf("%s: %q is not an RFC 3339 date-time", at, str)
		}
	}
	return nil
}

func (s *schema) validateNumber(v any, at string) error {
	num, ok := v.(json.Number)
	if !ok {
		return fmt.Errorf("%s: %v is not a number", at, v)
	}
	f, err := num.Float64()
	if err != nil {
		return fmt.Errorf("%s: %v: %w", at, v, err)
	}
	if s.Type == "integer" {
		if _, err := strconv.ParseInt(num.String(), 10, 64); err != nil {
			return fmt.Errorf("%s: %v is not a 64-bit integer", at, v)
		}
	}
	if (s.Minimum != nil && f < *s.Minimum) || (s.Maximum != nil && f > *s.Maximum) {
		return fmt.Errorf("%s: %v is out of range", at, v)
	}
	return nil
}

func (d *openapiDoc) validateObject(s *schema, v any, at string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %v is not an object", at, v)
	}
	for _, name := range s.Required {
		if _, ok := obj[name]; !ok {
			return fmt.Errorf("%s: required field %q is missing", at, name)
		}
	}
	for name, fv := range obj {
		p, ok := s.Properties[name]
		switch {
		case ok:
		case s.AdditionalProperties == nil || !s.AdditionalProperties.allowed:
			return fmt.Errorf("%s: field %q is not in the document", at, name)
		case s.AdditionalProperties.schema == nil:
			continue
		default:
			p = s.AdditionalProperties.schema
		}
		if err := d.validate(p, fv, at+"."+name); err != nil {
			return err
		}
	}
	return nil
}

// The checker can fail: each case breaks the document in one way, next to
// a body it accepts.
func TestOpenAPICheckerRefusesWhatTheDocumentDoesNotSay(t *testing.T) {
	t.Parallel()
	sp, err := spec()
	require.NoError(t, err)
	_, getJob := sp.route(http.MethodGet, "/v1/jobs/01J")
	require.NotNil(t, getJob)
	schemas := sp.Components.Schemas
	created := schemas["Job"].Properties["created_at"]
	counter := schemas["Job"].Properties["expected_tasks"]
	queue := schemas["JobSubmission"].Properties["queue"]
	jsonHeader := http.Header{"Content-Type": {"application/json"}}

	for _, tc := range []struct {
		name    string
		s       *schema
		body    string
		wantErr string // "" for accepted
	}{
		{"an error body", schemas["Error"], `{"error":{"code":"not_found","message":"no such job"}}`, ""},
		{"a field the document does not name", schemas["Error"], `{"error":{"code":"not_found","message":"m","hint":"h"}}`, `field "hint" is not in the document`},
		{"a missing required field", schemas["Error"], `{"error":{"code":"not_found"}}`, `required field "message" is missing`},
		{"a value outside the enum", schemas["JobState"], `"paused"`, "is not one of"},
		{"a wrong type", schemas["Error"], `{"error":"not_found"}`, "is not an object"},
		{"null where it is not nullable", created, `null`, "null is not allowed"},
		{"a date-time", created, `"2026-11-30T23:18:00.123Z"`, ""},
		{"a date that is not a date-time", created, `"2026-11-30"`, "not an RFC 3339 date-time"},
		{"a fraction for an integer", counter, `1.5`, "not a 64-bit integer"},
		{"an integer below its minimum", counter, `-1`, "out of range"},
		{"a string that does not match its pattern", queue, `"Upper"`, "does not match"},
	} {
		var v any
		dec := json.NewDecoder(strings.NewReader(tc.body))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&v), tc.name)
		err := sp.validate(tc.s, v, "body")
		if tc.wantErr == "" {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorContains(t, err, tc.wantErr, tc.name)
		}
	}

	notFound := []byte(`{"error":{"code":"not_found","message":"no such job"}}`)
	require.NoError(t, sp.validateResponse(getJob, http.StatusNotFound, jsonHeader, notFound))
	require.ErrorContains(t, sp.validateResponse(getJob, http.StatusTeapot, jsonHeader, notFound), "status 418 is not documented")
	require.ErrorContains(t, sp.validateResponse(getJob, http.StatusNotFound, http.Header{"Content-Type": {"text/html"}}, notFound), "is not one of the documented")
	require.ErrorContains(t, sp.validateResponse(getJob, http.StatusNotFound, jsonHeader, []byte("<html>")), "body is not JSON")

	_, err = loadOpenAPI([]byte(`{"components":{"schemas":{"X":{"type":"object","anyOf":[]}}}}`))
	require.ErrorContains(t, err, `unknown field "anyOf"`, "a keyword the checker does not know refuses the document")
	oneOf := &schema{OneOf: []*schema{{Type: "string"}, {Type: "integer"}}}
	require.NoError(t, sp.validate(oneOf, "x", "v"))
	require.ErrorContains(t, sp.validate(oneOf, true, "v"), "matches 0 of the 2 schemas of oneOf")
}

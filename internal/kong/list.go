package kong

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Page sizes of the Admin API: size defaults to 100 and may be 1..1000.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// maxPages bounds how many pages one list follows, so that a server that
// keeps answering with new offsets cannot keep the client forever.
const maxPages = 10000

// ListOptions narrow a list call.
type ListOptions struct {
	// Tags keeps only entities carrying every one of these tags.
	Tags []string
	// Size is the page size asked for (1..1000); 0 means the client's.
	Size int
}

// ListPage is one decoded page of a list answer.
type ListPage struct {
	// Items are the raw entities of the page.
	Items []json.RawMessage
	// Offset is the token for the next page; "" on the last page.
	Offset string
}

// ParseListPage decodes one page of an Admin API list answer:
//
//	{"data": [...], "offset": "...", "next": "/services?offset=..."}
//
// The last page has "next": null and no offset. An empty "data" may come as
// [] or as {} (Lua's empty table). The offset is taken from the "offset"
// field when present, else from the offset query parameter of "next".
func ParseListPage(body []byte) (ListPage, error) {
	var raw struct {
		Data   json.RawMessage `json:"data"`
		Next   json.RawMessage `json:"next"`
		Offset json.RawMessage `json:"offset"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return ListPage{}, fmt.Errorf("decoding list page: %w", err)
	}
	var p ListPage
	data := bytes.TrimSpace(raw.Data)
	switch {
	case len(data) == 0 || bytes.Equal(data, []byte("null")):
	case data[0] == '[':
		if err := json.Unmarshal(data, &p.Items); err != nil {
			return ListPage{}, fmt.Errorf("decoding list page data: %w", err)
		}
	case data[0] == '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return ListPage{}, fmt.Errorf("decoding list page data: %w", err)
		}
		if len(m) != 0 {
			return ListPage{}, errors.New("decoding list page: data is an object, not a list")
		}
	default:
		return ListPage{}, errors.New("decoding list page: data is not a list")
	}
	for i, it := range p.Items {
		if t := bytes.TrimSpace(it); len(t) == 0 || t[0] != '{' {
			return ListPage{}, fmt.Errorf("decoding list page: item %d is not an object", i)
		}
	}
	off, err := scalarString(raw.Offset)
	if err != nil {
		return ListPage{}, fmt.Errorf("decoding list page offset: %w", err)
	}
	next, err := scalarString(raw.Next)
	if err != nil {
		return ListPage{}, fmt.Errorf("decoding list page next: %w", err)
	}
	if off == "" && next != "" {
		u, err := url.Parse(next)
		if err != nil {
			return ListPage{}, fmt.Errorf("decoding list page next %q: %w", truncate(next, 80), err)
		}
		off = u.Query().Get("offset")
		if off == "" {
			return ListPage{}, fmt.Errorf("decoding list page: next %q has no offset", truncate(next, 80))
		}
	}
	p.Offset = off
	return p, nil
}

// scalarString reads a JSON string or number as a string; null or absent is "".
func scalarString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf("not a string or number: %s", truncate(string(raw), 40))
}

// filterableTag is the syntax Kong's ?tags= filter accepts for one tag.
var filterableTag = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// Filterable reports whether every tag can be used in Kong's ?tags= filter.
func Filterable(tags []string) bool {
	for _, t := range tags {
		if !filterableTag.MatchString(t) {
			return false
		}
	}
	return true
}

// list fetches every page of the collection at path and decodes the items
// into T, keeping those that carry opts.Tags. nested says the collection is
// under another entity (e.g. /upstreams/u/targets), where Kong ignores the
// tags filter: there it is not sent and applied here only.
func list[T any](ctx context.Context, c *Client, path string, nested bool, opts ListOptions, tagsOf func(*T) []string) ([]T, error) {
	size := opts.Size
	if size <= 0 {
		size = c.pageSize
	}
	size = min(max(size, 1), MaxPageSize)
	q := url.Values{}
	q.Set("size", strconv.Itoa(size))
	if len(opts.Tags) > 0 && !nested && Filterable(opts.Tags) {
		q.Set("tags", strings.Join(opts.Tags, ","))
	}
	var out []T
	seen := map[string]bool{}
	for range maxPages {
		body, err := c.raw(ctx, "GET", path, q, nil)
		if err != nil {
			return nil, err
		}
		page, err := ParseListPage(body)
		if err != nil {
			return nil, &TransportError{Method: "GET", Path: path, Err: err, BadAnswer: true}
		}
		for i, it := range page.Items {
			var v T
			if err := json.Unmarshal(it, &v); err != nil {
				return nil, &TransportError{Method: "GET", Path: path, Err: fmt.Errorf("decoding item %d: %w", i, err), BadAnswer: true}
			}
			if HasTags(tagsOf(&v), opts.Tags) {
				out = append(out, v)
			}
		}
		if page.Offset == "" {
			return out, nil
		}
		if seen[page.Offset] {
			return nil, &TransportError{Method: "GET", Path: path, Err: fmt.Errorf("offset %q repeated", truncate(page.Offset, 40)), BadAnswer: true}
		}
		seen[page.Offset] = true
		q.Set("offset", page.Offset)
	}
	return nil, &TransportError{Method: "GET", Path: path, Err: fmt.Errorf("more than %d pages", maxPages), BadAnswer: true}
}

package engine

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// What the drivers' search (store.ListJobsOpts.Search) shares, so that
// both find the same jobs: the text each indexes per job, and the
// patterns each matches it with.

// SearchText returns the text a job is found by besides its id and
// errors (store.ListJobsOpts.Search), which a driver stores with the job
// when it inserts its row (the jobs' search_text column): its type, its
// work queue and the scalar values of its metadata (strings unquoted,
// numbers as written, booleans), one a line, lowercase (SearchLower),
// cut to
// store.MaxSearchTextBytes at a character's boundary. Metadata that is
// not JSON adds nothing.
func SearchText(j warren.Job) string {
	var b strings.Builder
	b.WriteString(j.Type)
	b.WriteByte('\n')
	b.WriteString(j.Policy.EffectiveQueue())
	for _, v := range metadataValues(j.Metadata) {
		if b.Len() >= store.MaxSearchTextBytes {
			break
		}
		b.WriteByte('\n')
		b.WriteString(v)
	}
	return storedText(cutText(SearchLower(b.String()), store.MaxSearchTextBytes))
}

// metadataValues returns the scalar values of JSON metadata md in the
// order they are written, keys left out; those it read before the first
// error when md is not JSON.
func metadataValues(md json.RawMessage) []string {
	type frame struct{ object, keyNext bool }
	var (
		out   []string
		stack []frame
	)
	// valueDone records that a value of the container on top ended: in
	// an object, a key comes next.
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].keyNext = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(md))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF, or not JSON
			return out
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, keyNext: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		case string:
			if n := len(stack); n > 0 && stack[n-1].keyNext {
				stack[n-1].keyNext = false
				continue
			}
			out = append(out, t)
		case json.Number:
			out = append(out, t.String())
		case bool:
			out = append(out, strconv.FormatBool(t))
		}
		valueDone()
	}
}

// cutText returns s cut to at most n bytes at a character's boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// SearchPattern returns a LIKE pattern (escaped with '\') that matches
// texts holding q.
func SearchPattern(q string) string {
	return "%" + escapeLike(q) + "%"
}

// PrefixPattern returns a LIKE pattern (escaped with '\') that matches
// texts starting with q.
func PrefixPattern(q string) string {
	return escapeLike(q) + "%"
}

// escapeLike escapes LIKE's wildcards and its escape character in q.
func escapeLike(q string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q)
}

// FTSPhrase returns q as one FTS5 phrase (double quotes doubled): with
// SQLite's trigram tokenizer, it matches the texts holding q.
func FTSPhrase(q string) string {
	return `"` + strings.ReplaceAll(q, `"`, `""`) + `"`
}

// QueueValues returns the stored queue column values of jobs of work
// queue q (store.ListJobsOpts.Queue): q, and "" as well for
// protocol.DefaultQueue, which a job that names no queue has.
func QueueValues(q string) []string {
	if q == protocol.DefaultQueue {
		return []string{"", q}
	}
	return []string{q}
}

// SearchLower returns a search text as SearchText's text is stored:
// lowercase.
func SearchLower(q string) string { return strings.ToLower(q) }

// SearchRecentRows is how many of the newest jobs a driver may look at
// first for a search (store.ListJobsOpts.Search), the other filters
// applied, before it asks its indexes: a text that many jobs hold fills
// a page from the newest few, where its indexes would read every match.
// The first try answers only when it fills a page (and shows there is
// more); otherwise the indexes do, finding the same jobs.
const SearchRecentRows = 2000

// Package spool holds a submission's task payloads between reading them
// and writing them to the store: in memory while small, then in an
// unlinked temporary file. The API spools every submission before it
// calls the store, and the SQLite store spools what it is given before it
// takes its one writer, so that neither a slow client nor a slow producer
// holds a store connection.
package spool

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
)

// memoryLimit is how many bytes of payloads a spool keeps in memory before
// it moves them to a temporary file: small jobs, the common case, never
// touch the disk.
const memoryLimit = 1 << 20

// Spool holds task payloads, each prefixed with its length as a uvarint:
// in memory up to memoryLimit bytes, then in an unlinked temporary file.
// Its size is bounded by what its producer is bounded by (the API's body
// limit). It is not safe for concurrent use.
type Spool struct {
	mem  bytes.Buffer
	file *os.File      // nil while everything fits in mem
	w    *bufio.Writer // writes to file
	n    int64         // payloads spooled
}

// Tasks reads tasks to their end into a new spool. The first error tasks
// yields is returned as it is, and nothing is kept; so is an error writing
// the temporary file.
func Tasks(tasks iter.Seq2[json.RawMessage, error]) (*Spool, error) {
	sp := &Spool{}
	var lenBuf [binary.MaxVarintLen64]byte
	for payload, err := range tasks {
		if err == nil {
			k := binary.PutUvarint(lenBuf[:], uint64(len(payload)))
			err = sp.write(lenBuf[:k], payload)
		}
		if err != nil {
			sp.Close()
			return nil, err
		}
		sp.n++
	}
	if sp.w != nil {
		if err := sp.w.Flush(); err != nil {
			sp.Close()
			return nil, fmt.Errorf("spool tasks: %w", err)
		}
	}
	return sp, nil
}

// write appends the parts of one record, moving the spool to a file when
// memory is full.
func (sp *Spool) write(parts ...[]byte) error {
	if sp.file == nil && sp.mem.Len()+len(parts[0])+len(parts[1]) > memoryLimit {
		f, err := os.CreateTemp("", "warren-tasks-*")
		if err != nil {
			return fmt.Errorf("spool tasks: %w", err)
		}
		// Unlinked at once: the file disappears with its descriptor, even
		// after a crash.
		_ = os.Remove(f.Name())
		sp.file, sp.w = f, bufio.NewWriterSize(f, 256<<10)
		if _, err := sp.mem.WriteTo(sp.w); err != nil {
			return fmt.Errorf("spool tasks: %w", err)
		}
	}
	for _, p := range parts {
		var err error
		if sp.file == nil {
			_, err = sp.mem.Write(p)
		} else {
			_, err = sp.w.Write(p)
		}
		if err != nil {
			return fmt.Errorf("spool tasks: %w", err)
		}
	}
	return nil
}

// All yields the spooled payloads in order, each in a slice of its own
// (a store may keep a batch of them). It may be called more than once.
func (sp *Spool) All() iter.Seq2[json.RawMessage, error] {
	if sp.file == nil {
		return sp.fromMemory()
	}
	return func(yield func(json.RawMessage, error) bool) {
		if _, err := sp.file.Seek(0, io.SeekStart); err != nil {
			yield(nil, fmt.Errorf("read spooled tasks: %w", err))
			return
		}
		r := bufio.NewReaderSize(sp.file, 256<<10)
		for range sp.n {
			var buf []byte
			size, err := binary.ReadUvarint(r)
			if err == nil {
				buf = make([]byte, size)
				_, err = io.ReadFull(r, buf)
			}
			if err != nil {
				yield(nil, fmt.Errorf("read spooled tasks: %w", err))
				return
			}
			if !yield(buf, nil) {
				return
			}
		}
	}
}

// fromMemory yields the payloads of a spool held in memory, as slices of
// its buffer capped at their end, so that appending to one cannot
// overwrite the next.
func (sp *Spool) fromMemory() iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		b := sp.mem.Bytes()
		for range sp.n {
			size, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < size {
				yield(nil, errors.New("read spooled tasks: a record is cut short"))
				return
			}
			end := k + int(size)
			if !yield(b[k:end:end], nil) {
				return
			}
			b = b[end:]
		}
	}
}

// Len is the number of payloads spooled.
func (sp *Spool) Len() int64 { return sp.n }

// InMemory reports whether every payload is held in memory (no file).
func (sp *Spool) InMemory() bool { return sp.file == nil }

// Close releases the spool's file, if it has one.
func (sp *Spool) Close() {
	if sp.file != nil {
		_ = sp.file.Close()
	}
}

package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"os"
)

// spoolMemory is how many bytes of payloads a spool keeps in memory before
// it moves them to a temporary file: small jobs, the common case, never
// touch the disk.
const spoolMemory = 1 << 20

// spool holds a submission's task payloads, each prefixed with its length
// as a uvarint, from the moment the request body is read to the moment the
// store has written them: in memory up to spoolMemory bytes, then in an
// unlinked temporary file. Its size is bounded by the request body limit.
//
// Spooling is what keeps a slow or stalled client from holding a store
// connection (or SQLite's one writer): the store is called only once the
// whole body has arrived and been checked.
type spool struct {
	mem  bytes.Buffer
	file *os.File      // nil while everything fits in mem
	w    *bufio.Writer // writes to file
	n    int64         // payloads spooled
}

// spoolTasks reads tasks to their end into a new spool. The first error
// tasks yields is returned as it is, and nothing is kept; so is an error
// writing the temporary file.
func spoolTasks(tasks iter.Seq2[json.RawMessage, error]) (*spool, error) {
	sp := &spool{}
	var lenBuf [binary.MaxVarintLen64]byte
	for payload, err := range tasks {
		if err == nil {
			k := binary.PutUvarint(lenBuf[:], uint64(len(payload)))
			err = sp.write(lenBuf[:k], payload)
		}
		if err != nil {
			sp.close()
			return nil, err
		}
		sp.n++
	}
	if sp.w != nil {
		if err := sp.w.Flush(); err != nil {
			sp.close()
			return nil, fmt.Errorf("api: spool tasks: %w", err)
		}
	}
	return sp, nil
}

// write appends the parts of one record, moving the spool to a file when
// memory is full.
func (sp *spool) write(parts ...[]byte) error {
	if sp.file == nil && sp.mem.Len()+len(parts[0])+len(parts[1]) > spoolMemory {
		f, err := os.CreateTemp("", "warren-api-tasks-*")
		if err != nil {
			return fmt.Errorf("api: spool tasks: %w", err)
		}
		// Unlinked at once: the file disappears with its descriptor, even
		// after a crash.
		_ = os.Remove(f.Name())
		sp.file, sp.w = f, bufio.NewWriterSize(f, 256<<10)
		if _, err := sp.mem.WriteTo(sp.w); err != nil {
			return fmt.Errorf("api: spool tasks: %w", err)
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
			return fmt.Errorf("api: spool tasks: %w", err)
		}
	}
	return nil
}

// all yields the spooled payloads in order, each in a slice of its own
// (a store may keep a batch of them).
func (sp *spool) all() iter.Seq2[json.RawMessage, error] {
	if sp.file == nil {
		return sp.fromMemory()
	}
	return func(yield func(json.RawMessage, error) bool) {
		if _, err := sp.file.Seek(0, io.SeekStart); err != nil {
			yield(nil, fmt.Errorf("api: read spooled tasks: %w", err))
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
				yield(nil, fmt.Errorf("api: read spooled tasks: %w", err))
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
func (sp *spool) fromMemory() iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		b := sp.mem.Bytes()
		for range sp.n {
			size, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < size {
				yield(nil, fmt.Errorf("api: read spooled tasks: a record is cut short"))
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

// close releases the spool's file, if it has one.
func (sp *spool) close() {
	if sp.file != nil {
		_ = sp.file.Close()
	}
}

package sqlite

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"os"
	"sync"
)

// spool holds a job's task payloads in a temporary file, each prefixed
// with its length.
type spool struct {
	f *os.File
	n int64
}

// spoolBuffer is the size of the spool's read and write buffers; they are
// pooled, so a small job does not allocate two of them.
const spoolBuffer = 1 << 20

var (
	spoolWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, spoolBuffer) }}
	spoolReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, spoolBuffer) }}
)

// spoolTasks copies tasks into a new spool. The first error of tasks is
// returned as it is, and nothing is kept.
func spoolTasks(tasks iter.Seq2[json.RawMessage, error]) (*spool, error) {
	f, err := os.CreateTemp("", "warren-sqlite-tasks-*")
	if err != nil {
		return nil, fmt.Errorf("sqlite: spool tasks: %w", err)
	}
	// Unlinked at once: the file disappears with its descriptor, even
	// after a crash.
	_ = os.Remove(f.Name())
	sp := &spool{f: f}
	w := spoolWriters.Get().(*bufio.Writer)
	w.Reset(f)
	defer func() {
		w.Reset(nil)
		spoolWriters.Put(w)
	}()
	var lenBuf [binary.MaxVarintLen64]byte
	for payload, err := range tasks {
		if err != nil {
			sp.close()
			return nil, err
		}
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		k := binary.PutUvarint(lenBuf[:], uint64(len(payload)))
		if _, err := w.Write(lenBuf[:k]); err != nil {
			sp.close()
			return nil, fmt.Errorf("sqlite: spool tasks: %w", err)
		}
		if _, err := w.Write(payload); err != nil {
			sp.close()
			return nil, fmt.Errorf("sqlite: spool tasks: %w", err)
		}
		sp.n++
	}
	if err := w.Flush(); err != nil {
		sp.close()
		return nil, fmt.Errorf("sqlite: spool tasks: %w", err)
	}
	return sp, nil
}

// all yields the spooled payloads in order, each in its own buffer (the
// inserts keep a batch of them).
func (sp *spool) all() iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		if _, err := sp.f.Seek(0, io.SeekStart); err != nil {
			yield(nil, fmt.Errorf("sqlite: read spooled tasks: %w", err))
			return
		}
		r := spoolReaders.Get().(*bufio.Reader)
		r.Reset(sp.f)
		defer func() {
			r.Reset(nil)
			spoolReaders.Put(r)
		}()
		for range sp.n {
			var buf []byte
			size, err := binary.ReadUvarint(r)
			if err == nil {
				buf = make([]byte, size)
				_, err = io.ReadFull(r, buf)
			}
			if err != nil {
				yield(nil, fmt.Errorf("sqlite: read spooled tasks: %w", err))
				return
			}
			if !yield(buf, nil) {
				return
			}
		}
	}
}

func (sp *spool) close() { _ = sp.f.Close() }

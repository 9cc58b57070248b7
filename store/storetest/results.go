package storetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// bigResult is a JSON string of about n bytes whose every byte tells its
// place, so that a chunk read at the wrong offset shows.
func bigResult(n int) []byte {
	var b strings.Builder
	b.Grow(n + 2)
	b.WriteByte('"')
	for i := 0; b.Len() < n-1; i++ {
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[i%36])
	}
	b.WriteByte('"')
	return []byte(b.String())
}

// finishWith completes a fresh one-task job with result and returns its
// id.
func finishWith(t *testing.T, s store.Store, result []byte) string {
	t.Helper()
	job := newJob(t, s, 1)
	relayAll(t, s)
	apply(t, s, completed(job.ID, 1, `1`))
	ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobCompleted, result, "")
	require.NoError(t, err)
	require.True(t, ok)
	return job.ID
}

// readInChunks reads a job's result n bytes at a time with
// JobResultRange, checking the size it gives every time.
func readInChunks(t *testing.T, s store.Store, jobID string, n int64) []byte {
	t.Helper()
	var out bytes.Buffer
	size := int64(-1)
	for off := int64(0); ; off += n {
		chunk, sz, err := s.JobResultRange(t.Context(), jobID, off, n)
		require.NoError(t, err)
		if size >= 0 {
			require.Equal(t, size, sz, "the size at offset %d", off)
		}
		size = sz
		require.LessOrEqual(t, int64(len(chunk)), n)
		out.Write(chunk)
		if off+n >= size {
			require.Equal(t, size, int64(out.Len()), "the chunks add up to the size")
			return out.Bytes()
		}
		require.Equal(t, n, int64(len(chunk)), "a chunk before the end is whole (offset %d)", off)
	}
}

func testJobResultRange(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ReadsAnyRangeOfALargeResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		result := bigResult(700_001) // several of SQLite's parts, and a short last one
		id := finishWith(t, s, result)

		for _, n := range []int64{1 << 20, 256 << 10, 100_000, 4096, 700_001} {
			require.Equal(t, string(result), string(readInChunks(t, s, id, n)), "chunks of %d", n)
		}
		for _, r := range [][2]int64{{0, 1}, {262_143, 2}, {262_144, 10}, {524_287, 262_146}, {699_990, 100}, {700_000, 1}} {
			chunk, size, err := s.JobResultRange(t.Context(), id, r[0], r[1])
			require.NoError(t, err)
			require.Equal(t, int64(len(result)), size)
			end := min(r[0]+r[1], int64(len(result)))
			require.Equal(t, string(result[r[0]:end]), string(chunk), "range %v", r)
		}
		chunk, size, err := s.JobResultRange(t.Context(), id, 700_001, 10)
		require.NoError(t, err)
		require.Equal(t, int64(700_001), size)
		require.Empty(t, chunk, "past the end")
		_, _, err = s.JobResultRange(t.Context(), id, -1, 10)
		require.Error(t, err)

		whole, err := s.JobResult(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, string(result), string(whole), "JobResult reads it whole")
	})

	t.Run("ReadsASmallResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		id := finishWith(t, s, []byte(`[1, 2, 3]`))
		require.Equal(t, `[1, 2, 3]`, string(readInChunks(t, s, id, 4)))
		chunk, size, err := s.JobResultRange(t.Context(), id, 0, 1<<20)
		require.NoError(t, err)
		require.Equal(t, int64(9), size)
		require.Equal(t, `[1, 2, 3]`, string(chunk))
	})

	t.Run("NoResultIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, _, err := s.JobResultRange(t.Context(), "no-such-job", 0, 10)
		require.ErrorIs(t, err, warren.ErrNotFound)
		job := newJob(t, s, 1)
		_, _, err = s.JobResultRange(t.Context(), job.ID, 0, 10)
		require.ErrorIs(t, err, warren.ErrNotFound, "an open job has none")
	})

	t.Run("ARedriveAndANewCloseReplaceALargeResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		job.Policy.ToleratedFailures = 1
		first := bigResult(600_000)
		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobCompleted, first, "")
		require.NoError(t, err)
		require.True(t, ok)

		_, _, err = s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		_, _, err = s.JobResultRange(t.Context(), job.ID, 0, 10)
		require.ErrorIs(t, err, warren.ErrNotFound, "a redrive clears the stored result, parts and all")

		relayAll(t, s)
		apply(t, s, completed(job.ID, 2, `2`))
		second := []byte(`"short"`)
		ok, err = s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobCompleted, second, "")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, string(second), string(readInChunks(t, s, job.ID, 3)))
		whole, err := s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, string(second), string(whole))
	})

	t.Run("ADeletedJobsLargeResultGoes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		id := finishWith(t, s, bigResult(600_000))
		require.NoError(t, s.DeleteJob(t.Context(), id))
		_, _, err := s.JobResultRange(t.Context(), id, 0, 10)
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, err = s.JobResult(t.Context(), id)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}

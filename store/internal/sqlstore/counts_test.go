package sqlstore_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// fakeRows yields rows of (state, count), then err from Err.
type fakeRows struct {
	rows    [][2]any
	at      int
	scanErr error
	err     error
}

func (r *fakeRows) Next() bool {
	r.at++
	return r.at <= len(r.rows)
}

func (r *fakeRows) Scan(dest ...any) error {
	if r.scanErr != nil {
		return r.scanErr
	}
	row := r.rows[r.at-1]
	*dest[0].(*string) = row[0].(string)
	*dest[1].(*int64) = row[1].(int64)
	return nil
}

func (r *fakeRows) Err() error { return r.err }

func TestScanJobCounts(t *testing.T) {
	t.Parallel()
	counts, err := sqlstore.ScanJobCounts(&fakeRows{rows: [][2]any{{"running", int64(3)}, {"failed", int64(1)}}})
	require.NoError(t, err)
	require.Equal(t, map[warren.JobState]int64{warren.JobRunning: 3, warren.JobFailed: 1}, counts)

	counts, err = sqlstore.ScanJobCounts(&fakeRows{})
	require.NoError(t, err)
	require.Empty(t, counts)
	require.NotNil(t, counts, "no jobs is an empty map, not nil")
}

func TestScanJobCountsErrors(t *testing.T) {
	t.Parallel()
	errScan, errRows := errors.New("scan"), errors.New("rows")
	_, err := sqlstore.ScanJobCounts(&fakeRows{rows: [][2]any{{"running", int64(3)}}, scanErr: errScan})
	require.ErrorIs(t, err, errScan)
	_, err = sqlstore.ScanJobCounts(&fakeRows{err: errRows})
	require.ErrorIs(t, err, errRows, "the result set's error is returned")
}

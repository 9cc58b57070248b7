package sqlstore

import "github.com/warrenhq/warren"

// Rows is the part of a result set that the scanners read: *sql.Rows and
// pgx.Rows both have it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanJobCounts reads rows of (state, count), one per job state, into
// the answer of store.Store.CountJobs. The caller closes rows.
func ScanJobCounts(rows Rows) (map[warren.JobState]int64, error) {
	counts := map[warren.JobState]int64{}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		counts[warren.JobState(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return counts, nil
}

package postgres

// The retention statements, for the plan test.
const (
	ExpiringByDefaultSQL = expiringByDefaultSQL
	ExpiringByOwnSQL     = expiringByOwnSQL
	PurgeTasksSQL        = purgeTasksSQL
)

package api

// Routes maps the pattern of every route the handler serves to the scope a
// token needs for it ("" for a public route), for the OpenAPI test.
func Routes() map[string]Scope {
	m := map[string]Scope{}
	for _, r := range (&server{}).routes() {
		m[r.pattern] = r.scope
	}
	return m
}

// WatchedJobs is how many jobs e is watching (polling) now.
func WatchedJobs(e *Events) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.watches)
}

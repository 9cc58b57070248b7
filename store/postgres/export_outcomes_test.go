package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Trace replaces s's pool by one on url whose connections report every
// statement and batch to tracer, so a test can count what a call sends.
func Trace(ctx context.Context, s *Store, url string, tracer pgx.QueryTracer) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	s.pool.Close()
	s.pool = pool
	return nil
}

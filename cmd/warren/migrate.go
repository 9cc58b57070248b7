package main

import (
	"context"

	"github.com/warrenhq/warren/store/open"
)

func runMigrate(ctx context.Context, args []string, env *environment) error {
	var c common
	fs := newFlagSet("migrate", "Apply the job store's embedded schema migrations (every command also applies them at start).", env)
	c.register(fs, env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if err := checkDatabaseURL(fs, c.databaseURL); err != nil {
		return err
	}
	s, err := open.Open(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	env.logger.Info("store migrated", "database", redactDB(c.databaseURL))
	return nil
}

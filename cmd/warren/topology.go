package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/envconfig"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/open"
)

func runTopology(ctx context.Context, args []string, env *environment) error {
	if len(args) > 0 && slices.Contains([]string{"-h", "--help", "-help", "help"}, args[0]) {
		args = []string{"delete", "--help"} // its only subcommand
	}
	if len(args) == 0 || args[0] != "delete" {
		fmt.Fprintln(env.stderr, `warren topology: want the subcommand delete (see "warren topology --help")`)
		return errUsage
	}
	var c common
	fs := newFlagSet("topology delete", "Delete every queue and exchange of one installation (--prefix) from RabbitMQ, with their messages:\n"+
		"the fixed queues, the retry tiers (the defaults and --retry-tiers), and the work queues per type that its job store\n"+
		"knows (every job's queue, --database) or --queues names. It refuses while any of them has a consumer (a server or\n"+
		"a worker of the prefix is running) unless --force, and prints what it deleted.", env)
	c.register(fs, env)
	queues := fs.String("queues", "", "more work queues per type to delete, comma-separated (those of workers whose jobs the store does not hold)")
	force := fs.Bool("force", false, "delete even queues that have consumers (running servers and workers lose them)")
	noStore := fs.Bool("no-store", false, "do not read the job store for work queues per type")
	fs.localFlags("queues", "force", "no-store")
	if err := parse(fs, args[1:], env); err != nil {
		return err
	}
	if c.prefix == "" {
		return usageErrorf("topology delete needs --prefix (or WARREN_PREFIX): it deletes that installation's queues and exchanges")
	}
	if err := checkAMQPURL(fs, c.amqpURL); err != nil {
		return err
	}
	tiers, err := c.tiers()
	if err != nil {
		return err
	}
	work := envconfig.SplitList(*queues)
	for _, q := range work {
		if err := protocol.CheckQueueName(q); err != nil {
			return usageErrorf("--queues: %v", err)
		}
	}
	if !*noStore {
		known, err := storeQueues(ctx, c.databaseURL)
		if err != nil {
			return err
		}
		work = append(work, known...)
	}
	conn, err := broker.Dial(ctx, c.amqpURL, "warren topology delete "+c.prefix)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	names := protocol.NamesFor(c.prefix)
	td, err := broker.DeleteInstallation(conn, names, work, *force, tiers...)
	for _, q := range td.Queues {
		fmt.Fprintf(env.stdout, "deleted queue %s (%d messages)\n", q.Name, q.Messages)
	}
	for _, x := range td.Exchanges {
		fmt.Fprintf(env.stdout, "deleted exchange %s\n", x)
	}
	if err != nil {
		return err
	}
	if len(td.Consumed) > 0 {
		var which []string
		for _, q := range td.Consumed {
			which = append(which, fmt.Sprintf("%s (%d consumers)", q.Name, q.Consumers))
		}
		return fmt.Errorf("nothing deleted: a server or worker of prefix %q is running, consuming %s; stop it, or pass --force",
			c.prefix, strings.Join(which, ", "))
	}
	if len(td.Queues) == 0 && len(td.Exchanges) == 0 {
		fmt.Fprintf(env.stdout, "nothing of prefix %q exists\n", c.prefix)
	}
	return nil
}

// storeQueues are the work queues of every job in the store at rawURL
// (their queues and their reduce tasks'), each once; a default SQLite
// file that does not exist has none (opening it would create it).
func storeQueues(ctx context.Context, rawURL string) ([]string, error) {
	if path, ok := strings.CutPrefix(rawURL, "sqlite://"); ok {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	s, err := open.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var queues []string
	opts := store.ListJobsOpts{Limit: 1000}
	for {
		jobs, next, err := s.ListJobs(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			for _, q := range []string{j.Policy.EffectiveQueue(), j.Policy.ReduceQueue()} {
				if !slices.Contains(queues, q) {
					queues = append(queues, q)
				}
			}
		}
		if next == "" {
			return queues, nil
		}
		opts.Cursor = next
	}
}

package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/warrenhq/warren/worker"
)

// A worker binary of your own configured as `warren worker` is: the
// variables of the deployment (a systemd unit's EnvironmentFile, a
// compose file's environment) set the broker, prefix, queues, retry tiers
// and limits; the program sets what no variable names.
func ExampleConfigFromEnv() {
	// Set here for the example; a deployment sets them for the process.
	for k, v := range map[string]string{"WARREN_PREFIX": "team1", "WARREN_QUEUES": "emails", "WARREN_CONCURRENCY": "4"} {
		_ = os.Setenv(k, v)
		defer os.Unsetenv(k)
	}

	cfg, err := worker.ConfigFromEnv()
	if err != nil {
		fmt.Println(err) // names each variable that does not parse
		return
	}
	cfg.Logger = slog.Default()
	w, err := worker.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Handle("send_email", func(context.Context, worker.Task) (any, error) { return nil, nil })
	fmt.Println(cfg.Prefix, cfg.Queues, cfg.Concurrency)
	// Output: team1 [emails] 4
}

package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store/sqlite"
)

// Pause holds an open job: no new task of it starts until Resume, and
// the job says why it waits.
func ExampleClient_Pause() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "warren-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warren.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	h, _ := api.New(api.Config{Store: st})
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := client.New(srv.URL)

	sub, _ := c.Submit(ctx, client.JobSpec{Type: "resize", Tasks: []json.RawMessage{json.RawMessage(`"a.jpg"`), json.RawMessage(`"b.jpg"`)}})
	job, _ := c.Pause(ctx, sub.ID)
	fmt.Println("paused:", job.Paused, "waiting:", job.Waiting.Reason)
	job, _ = c.Resume(ctx, sub.ID)
	fmt.Println("paused:", job.Paused, "state:", job.State)

	q, _ := c.PauseQueue(ctx, "gpu")
	fmt.Println("queue", q.Queue, "paused:", q.Paused)
	// Output:
	// paused: true waiting: paused
	// paused: false state: pending
	// queue gpu paused: true
}

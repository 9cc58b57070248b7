package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store/sqlite"
)

// A job submitted over HTTP is accepted at once; its status URL follows it.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "warren-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "warren.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	h, err := api.New(api.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/jobs", "application/json",
		strings.NewReader(`{"type": "thumbnail", "tasks": [{"key": "a.png"}, {"key": "b.png"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	var accepted struct {
		State     string `json:"state"`
		StatusURL string `json:"status_url"`
	}
	err = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, accepted.State)

	resp, err = http.Get(srv.URL + accepted.StatusURL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var job struct {
		ExpectedTasks int    `json:"expected_tasks"`
		Reduce        string `json:"reduce"`
		MaxRetries    int    `json:"max_retries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&job); err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.ExpectedTasks, "tasks, reduce:", job.Reduce, "max_retries:", job.MaxRetries)
	// Output:
	// 202 pending
	// 2 tasks, reduce: collect max_retries: 3
}

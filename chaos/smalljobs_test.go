package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFrontForwardsNewConnectionsToTheLatestServer(t *testing.T) {
	t.Parallel()
	serve := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	a, b := serve("a"), serve("b")
	f, err := newFront()
	require.NoError(t, err)
	defer f.close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func() (string, error) {
		resp, err := hc.Get(f.url())
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	_, err = get()
	require.Error(t, err, "no server yet: the front closes the connection")
	f.setBackend(strings.TrimPrefix(a.URL, "http://"))
	got, err := get()
	require.NoError(t, err)
	require.Equal(t, "a", got)
	f.setBackend(strings.TrimPrefix(b.URL, "http://"))
	got, err = get()
	require.NoError(t, err)
	require.Equal(t, "b", got)
	b.Close()
	_, err = get()
	require.Error(t, err, "a server gone: the front closes the connection")
}

func TestSmallJobSpec(t *testing.T) {
	t.Parallel()
	s := newSmallRun(70, nil, "key-", 0)
	fails := 0
	for k := range 70 {
		spec := s.spec(k)
		require.Equal(t, "key-"+strconv.Itoa(k), spec.IdempotencyKey)
		require.Len(t, spec.Tasks, smallJobTasks)
		for i, raw := range spec.Tasks {
			var p struct {
				Value     int64 `json:"value"`
				FailTimes int   `json:"fail_times"`
			}
			require.NoError(t, json.Unmarshal(raw, &p))
			require.Equal(t, smallValue(k, i), p.Value)
			fails += p.FailTimes
		}
	}
	require.Equal(t, 70*smallJobTasks/smallFailEvery, fails)
	require.JSONEq(t, `{"chaos_job":3}`, string(s.spec(3).Metadata))
}

func TestSmallJobsSetting(t *testing.T) {
	t.Setenv("CHAOS_SMALL_JOBS", "")
	n, err := smallJobsSetting()
	require.NoError(t, err)
	require.Equal(t, defaultSmallJobs, n)
	t.Setenv("CHAOS_SMALL_JOBS", "40")
	n, err = smallJobsSetting()
	require.NoError(t, err)
	require.Equal(t, 40, n)
	for _, bad := range []string{"0", "-1", "x"} {
		t.Setenv("CHAOS_SMALL_JOBS", bad)
		_, err = smallJobsSetting()
		require.ErrorContains(t, err, "CHAOS_SMALL_JOBS must be a positive integer")
	}
}

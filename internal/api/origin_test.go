package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
)

// request sends method path to b's server with Host host and the headers
// given, and checks the answer against the OpenAPI document.
func (b *testBundle) request(t *testing.T, method, path, host string, body io.Reader, header ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, body)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, b.srv.Client(), req)
}

// concretePath fills a route pattern's parameters.
func concretePath(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.ReplaceAll(path, "{queue}", "q1")
	path = strings.ReplaceAll(path, "{id}", "01J0000000000000000000000")
	return method, strings.ReplaceAll(path, "{task_id}", "1")
}

// A server without tokens answers only to its own names: a page whose
// host name an attacker points at 127.0.0.1 (DNS rebinding) sends its
// requests with that name, and gets nothing, on any route, the
// dashboard's files included.
func TestWithoutTokensOtherHostsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.AllowedHosts = []string{"Warren.Internal."} }})

	for pattern := range api.Routes() {
		method, path := concretePath(pattern)
		for _, host := range []string{"attacker.example", "attacker.example:8080", "127.0.0.1.attacker.example", "localhost.attacker.example"} {
			resp := b.request(t, method, path, host, nil)
			requireError(t, resp, http.StatusMisdirectedRequest, "misdirected")
			require.Contains(t, errorMessage(t, resp), "WARREN_ALLOWED_HOSTS")
		}
	}
	requireError(t, b.request(t, http.MethodGet, "/ui/", "attacker.example", nil), http.StatusMisdirectedRequest, "misdirected")
	b.mu.Lock()
	require.Empty(t, b.submitted, "nothing refused reaches the store")
	b.mu.Unlock()

	for _, host := range []string{"", "localhost:8080", "LOCALHOST", "app.localhost:1", "127.0.0.1", "[::1]:8080", "10.1.2.3:80", "warren.internal", "warren.internal.:8080"} {
		resp := b.request(t, http.MethodGet, "/v1/jobs", host, nil)
		require.Equal(t, http.StatusOK, resp.status, "Host %q: %s", host, resp.body)
	}
}

// A server without tokens refuses every state-changing request a browser
// sends from a page of another origin, on every route that changes
// something; its own dashboard (same origin) and clients that are not
// browsers (no Origin, no Sec-Fetch-Site) are answered.
func TestWithoutTokensCrossOriginWritesAreRefused(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{}
	b := setup(t, withDeadLetters(fake, options{}))
	host := strings.TrimPrefix(b.srv.URL, "http://")

	for pattern := range api.Routes() {
		method, path := concretePath(pattern)
		if method == http.MethodGet {
			continue
		}
		for _, header := range [][]string{
			{"Origin", "https://attacker.example"},
			{"Origin", "http://localhost:1"},                            // another port is another origin
			{"Origin", "https://" + host},                               // another scheme too
			{"Origin", "null"},                                          // a sandboxed frame, a file:// page
			{"Sec-Fetch-Site", "cross-site"},                            // a browser that sends no Origin
			{"Sec-Fetch-Site", "same-site", "Origin", "http://" + host}, // a sibling subdomain's page, its Origin forged in vain
		} {
			// A "simple" request, which a browser sends without asking
			// first: a form's text/plain body.
			resp := b.request(t, method, path, "", strings.NewReader(`{"all":true}`), append([]string{"Content-Type", "text/plain"}, header...)...)
			requireError(t, resp, http.StatusForbidden, "cross_origin")
		}
	}
	b.mu.Lock()
	require.Empty(t, b.submitted, "nothing refused reaches the store")
	b.mu.Unlock()
	require.Empty(t, fake.recorded(), "nothing refused reaches the queue")

	submit := `{"type":"echo","tasks":[{}]}`
	resp := b.request(t, http.MethodPost, "/v1/jobs", "", strings.NewReader(submit),
		"Content-Type", "application/json", "Origin", b.srv.URL, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusAccepted, resp.status, "the dashboard's own request: %s", resp.body)
	resp = b.request(t, http.MethodPost, "/v1/jobs", "", strings.NewReader(submit), "Content-Type", "application/json")
	require.Equal(t, http.StatusAccepted, resp.status, "curl, the CLI, the clients: %s", resp.body)
	resp = b.request(t, http.MethodGet, "/v1/jobs", "", nil, "Origin", "https://attacker.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusOK, resp.status, "a read changes nothing, and without CORS its page cannot read it: %s", resp.body)
}

// A body must say it is JSON: a browser's simple request (a Blob without
// a type) sends none, and used to skip the check.
func TestDeadLetterBodiesMustBeJSON(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{}
	b := setup(t, withDeadLetters(fake, options{}))
	for _, path := range []string{"/v1/deadletters/replay", "/v1/deadletters/purge"} {
		resp := b.request(t, http.MethodPost, path, "", strings.NewReader(`{"job_id":"j1"}`))
		requireError(t, resp, http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	require.Empty(t, fake.recorded())
}

// With tokens, neither check applies: a page of another origin holds no
// token, and a server behind a proxy may be reached by any name.
func TestWithTokensHostAndOriginAreNotChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "w0:write"})
	resp := b.request(t, http.MethodGet, "/v1/jobs", "warren.example.com", nil, bearer("w0")...)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	resp = b.request(t, http.MethodPost, "/v1/jobs", "warren.example.com", strings.NewReader(`{"type":"echo","tasks":[{}]}`),
		append([]string{"Content-Type", "application/json", "Origin", "https://dashboard.example.com"}, bearer("w0")...)...)
	require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
}

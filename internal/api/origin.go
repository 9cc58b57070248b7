package api

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A server without tokens trusts whoever can reach it, and it listens on
// a loopback address for that reason (server.Config refuses any other).
// Loopback is no boundary against a browser on the same machine, though:
// a page of any origin may send it requests (a form, or fetch without
// reading the answer), and a page whose host name its attacker points at
// 127.0.0.1 after it loaded (DNS rebinding) may read the answers as its
// own. originGuard closes both ways for such a server: it answers only
// requests whose Host is one of the server's own names, where a
// rebinding page's request carries the attacker's name, and it refuses
// every state-changing request a browser sends from another origin. A
// server with tokens needs neither check: a page of another origin never
// holds a token (the dashboard keeps it in its own origin's storage), and
// the API reads no cookie.

// safeMethods are the methods that change nothing, which a page of
// another origin may send: without a rebinding Host, it cannot read the
// answers (the API sends no CORS header).
var safeMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true}

// originGuard decides which requests a server without tokens answers.
type originGuard struct {
	// hosts are the host names (lowercase, without a port) the server
	// answers to besides localhost and IP addresses.
	hosts map[string]bool
}

// newOriginGuard returns the guard of a server that answers to hosts
// besides localhost and IP addresses.
func newOriginGuard(hosts []string) *originGuard {
	g := &originGuard{hosts: map[string]bool{}}
	for _, h := range hosts {
		if h = normalHost(h); h != "" {
			g.hosts[h] = true
		}
	}
	return g
}

// ownHost reports whether host (a Host header or an origin's host, with
// or without a port) names this server: an IP address, which no DNS
// rebinding can give, "localhost" or a name under it (RFC 6761 keeps
// them on loopback), or one of the configured names.
func (g *originGuard) ownHost(host string) bool {
	h := normalHost(host)
	switch {
	case h == "":
		return false
	case net.ParseIP(h) != nil:
		return true
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	}
	return g.hosts[h]
}

// check returns the error that refuses r, or nil when the server may
// answer it.
func (g *originGuard) check(r *http.Request) *apiError {
	if !g.ownHost(r.Host) {
		return errorf(http.StatusMisdirectedRequest, codeMisdirected,
			"this server does not answer to the host %q: a server without API tokens answers to localhost, IP addresses and the names in WARREN_ALLOWED_HOSTS", r.Host)
	}
	if safeMethods[r.Method] {
		return nil
	}
	// Browsers send Sec-Fetch-Site with every request (all current
	// ones), and Origin with every request that is not a GET or HEAD;
	// clients that are not browsers (curl, the CLI, the Go and Python
	// clients) send neither.
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return crossSite("a page of another site")
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return crossSite("an opaque origin (" + origin + ")")
	}
	if sameOrigin(u, r) || (g.hosts[normalHost(u.Host)] && g.ownHost(r.Host)) {
		return nil
	}
	return crossSite("origin " + origin)
}

// crossSite is the refusal of a state-changing request sent from another
// origin than the server's own.
func crossSite(from string) *apiError {
	return errorf(http.StatusForbidden, codeCrossOrigin,
		"refusing a state-changing request from %s: a server without API tokens takes them only from its own dashboard and from clients that are not browsers", from)
}

// sameOrigin reports whether origin u is the one r was sent to: the
// scheme r came by, and r's Host's name and port, a missing port being
// the scheme's default.
func sameOrigin(u *url.URL, r *http.Request) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	oh, op := splitHostPort(u.Host, defaultPort(u.Scheme))
	rh, rp := splitHostPort(r.Host, defaultPort(scheme))
	return u.Scheme == scheme && oh != "" && oh == rh && op == rp
}

// defaultPort is the port of a URL of scheme that names none.
func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// splitHostPort splits host into its lowercase name (IPv6 without
// brackets) and port, port being def when host has none.
func splitHostPort(host, def string) (string, string) {
	if h, p, err := net.SplitHostPort(host); err == nil {
		return strings.ToLower(h), p
	}
	return strings.ToLower(strings.Trim(host, "[]")), def
}

// normalHost is host without its port, brackets and a final dot, in
// lowercase.
func normalHost(host string) string {
	h, _ := splitHostPort(strings.TrimSpace(host), "")
	return strings.TrimSuffix(h, ".")
}

// Package ui is warren's dashboard: static files (one HTML page, a style
// sheet and plain JavaScript modules, with no build step) embedded in the
// binary and served at /ui/ by the API handler. The files hold no data:
// the page reads everything from the API's JSON routes, sending the
// user's bearer token, so the files themselves are public.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy every dashboard file is served with:
// scripts, styles and connections only from the server itself, no inline
// script or eval, and no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file, read once.
type file struct {
	name string // for the Content-Type and ServeContent
	body []byte
	etag string
}

// Handler serves the dashboard under Prefix: a file of the embedded
// static directory by its name (/ui/app.js), and index.html for Prefix
// and for any other path under it without a file extension, the page's
// own routes (/ui/jobs/{id}); an unknown file is a 404. Every answer
// carries ContentSecurityPolicy and the other security headers, and
// Cache-Control no-cache with an ETag, so a browser revalidates (cheaply,
// 304) and never runs the files of an older server.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		name := strings.TrimPrefix(p, "static/")
		files[name] = file{name: name, body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil { // the files are compiled in: this cannot happen
		panic("ui: reading the embedded files: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		f, ok := files[name]
		if !ok && path.Ext(name) == "" {
			f, ok = files["index.html"]
		}
		if !ok {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("404: no such file in the dashboard\n"))
			return
		}
		if ct := mime.TypeByExtension(path.Ext(f.name)); ct != "" {
			h.Set("Content-Type", ct)
		}
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
	})
}

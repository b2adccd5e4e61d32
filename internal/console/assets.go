package console

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/tandem-tx/tandem/internal/webassets"
)

//go:embed static/index.html static/console.js static/console.css
var static embed.FS

// asset is one file of the page.
type asset struct {
	fs          fs.FS
	name        string
	contentType string
}

// assets maps each path the page's files are served at to its file. The
// files hold no data of the coordinator: they are the same for everyone.
var assets = map[string]asset{
	"/":                          {static, "static/index.html", "text/html; charset=utf-8"},
	"/console/console.js":        {static, "static/console.js", "text/javascript; charset=utf-8"},
	"/console/console.css":       {static, "static/console.css", "text/css; charset=utf-8"},
	"/console/uplot.js":          {webassets.UPlot, "uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8"},
	"/console/uplot.css":         {webassets.UPlot, "uplot/uPlot.min.css", "text/css; charset=utf-8"},
	"/console/LICENSE-uplot.txt": {webassets.UPlot, "uplot/LICENSE", "text/plain; charset=utf-8"},
}

// IsAsset reports whether path (exactly, as the request names it) is one of
// the page's files. The admin listener serves those without a token even
// where its data needs one: a browser cannot send a token when it opens a
// page, and the files say nothing about the coordinator.
func IsAsset(path string) bool {
	_, ok := assets[path]
	return ok
}

// Register serves the page's files on mux (GET and HEAD).
func Register(mux *http.ServeMux) {
	for path, a := range assets {
		pattern := "GET " + path
		if path == "/" {
			pattern = "GET /{$}"
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			b, err := fs.ReadFile(a.fs, a.name)
			if err != nil { // embedded: cannot happen short of a broken build
				http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", a.contentType)
			_, _ = w.Write(b)
		})
	}
}

// PageWeight is the total size of the page's files in bytes (what a browser
// downloads to open it, before compression).
func PageWeight() int {
	n := 0
	for _, a := range assets {
		if b, err := fs.ReadFile(a.fs, a.name); err == nil {
			n += len(b)
		}
	}
	return n
}

// ContentSecurityPolicy is sent with every answer of the admin listener:
// scripts, styles and fetches from the listener itself only, no inline
// script or style markup, no plugins, no framing, no form posts.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Secure sets the security headers on every answer of next: the
// Content-Security-Policy, X-Content-Type-Options nosniff (a JSON answer is
// never run as script or shown as a page), X-Frame-Options DENY (no
// clickjacking of the resolve button), no referrer, and no caching (the
// answers are live data).
func Secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// Package browser tests Tandem's web pages in a real browser: headless
// Chromium (Debian's chromium package, /usr/bin/chromium) driven by chromedp,
// against a real coordinator and the real databases of scripts/db.
//
// Run (scripts/test does, in its browser step, after installing Chromium when
// it is missing):
//
//	eval "$(scripts/db env)"
//	go test -tags browser -count=1 ./test/browser/
//
// Without TANDEM_PG_DSN / TANDEM_MYSQL_DSN, or without Chromium, the tests
// skip, unless TANDEM_E2E_REQUIRED=1 (scripts/test and CI), where they fail.
// Screenshots go to TANDEM_SCREENSHOT_DIR when set, else to the test's
// temporary directory (the test logs where).
package browser

// The tests are in files with the build tag browser: without it, this
// package builds and has no tests.

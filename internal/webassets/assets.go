// Package webassets holds the third-party files Tandem's web pages embed: the
// uPlot charting library (MIT, its licence in uplot/LICENSE), vendored from
// the npm registry so that the Go build needs no JavaScript tooling and the
// pages work with no internet.
//
// The files are exactly those of the npm package uplot@1.6.32 (dist/uPlot.iife.min.js,
// dist/uPlot.min.css, LICENSE). scripts/vendor-uplot fetches that version again
// and checks the files are unchanged; to upgrade, change the version there and
// here and run it with --update.
package webassets

import "embed"

// UPlotVersion is the vendored uPlot release.
const UPlotVersion = "1.6.32"

// UPlot holds uplot/uPlot.iife.min.js (defines the global uPlot),
// uplot/uPlot.min.css and uplot/LICENSE.
//
//go:embed uplot/uPlot.iife.min.js uplot/uPlot.min.css uplot/LICENSE
var UPlot embed.FS

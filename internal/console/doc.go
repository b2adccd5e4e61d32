// Package console is the admin listener's live web page (GET /): the files
// of the page, embedded in the binary (no CDN, no build step; the charts are
// uPlot from internal/webassets), the HTTP headers that lock the page down,
// and the Sampler that keeps the last minutes of throughput, latency, wait
// events, decision-log and standby figures in a ring, so that a page opened
// now shows them at once.
//
// What the page may do is exactly what the admin listener allows (package
// server, admin.go): it reads the same JSON endpoints as the tandem CLI,
// sends the admin token, when the operator enters it, in an Authorization
// header, never a cookie (no request is authenticated by the browser on its
// own, so there is nothing to forge across sites): with POSTs, and with reads
// only where the listener may need it. On a plaintext loopback listener,
// whose port anyone may take once the coordinator stops, the page keeps the
// token in memory only; over HTTPS in the tab's sessionStorage. It puts
// everything the server says into the page as text
// (textContent), never as markup. The Content-Security-Policy allows scripts
// and styles from the listener itself only, and no framing.
package console

// Package failpoint lets tests crash, fail or slow the coordinator at named
// steps of the commit path. It is compiled in only with the build tag
// "failpoints"; in release builds Inject is an empty function the compiler
// removes.
//
// With the tag, TANDEM_FAILPOINTS configures it at start:
//
//	TANDEM_FAILPOINTS='after-commit-record=kill;before-phase2=sleep(500ms)'
//
// Actions: kill (SIGKILL to this process: nothing after it runs, as with
// kill -9), kill-after(DURATION) (carry on, SIGKILL after DURATION), error
// (Inject returns an error), sleep(DURATION).
//
// Names in use: before-commit-record, after-commit-record, before-phase2,
// after-phase2, before-end, after-end.
package failpoint

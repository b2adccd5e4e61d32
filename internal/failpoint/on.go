//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

var (
	mu      sync.RWMutex
	actions = parse(os.Getenv("TANDEM_FAILPOINTS"))
	hooks   = map[string]func() error{}
)

// Set arms name with an action, as TANDEM_FAILPOINTS would, from a test or a
// test's child process; "" disarms it. It returns a function that restores
// the previous action.
func Set(name, action string) (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	prev, had := actions[name]
	if action == "" {
		delete(actions, name)
	} else {
		actions[name] = action
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if had {
			actions[name] = prev
		} else {
			delete(actions, name)
		}
	}
}

// SetHook makes Inject(name) call fn and return its error, before any
// action set for name; nil removes the hook. For in-process tests: a hook
// can copy the data directory (what a crash at that step would leave),
// count, or block. It returns a function that removes the hook.
func SetHook(name string, fn func() error) (remove func()) {
	mu.Lock()
	defer mu.Unlock()
	if fn == nil {
		delete(hooks, name)
	} else {
		hooks[name] = fn
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(hooks, name)
	}
}

func parse(spec string) map[string]string {
	m := map[string]string{}
	for _, part := range strings.Split(spec, ";") {
		if name, action, ok := strings.Cut(strings.TrimSpace(part), "="); ok {
			m[name] = action
		}
	}
	return m
}

// Inject runs the action configured for name, if any.
func Inject(name string) error {
	mu.RLock()
	action, ok := actions[name]
	hook := hooks[name]
	mu.RUnlock()
	if hook != nil {
		if err := hook(); err != nil {
			return err
		}
	}
	if !ok {
		return nil
	}
	switch {
	case action == "kill":
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	case strings.HasPrefix(action, "kill-after(") && strings.HasSuffix(action, ")"):
		// Returns at once; SIGKILLs the process after the delay, from another
		// goroutine (a crash shortly after this step, whatever runs meanwhile).
		d, err := time.ParseDuration(action[len("kill-after(") : len(action)-1])
		if err == nil {
			go func() {
				time.Sleep(d)
				fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL after %s\n", name, d)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}()
		}
	case action == "error":
		return fmt.Errorf("failpoint %s: injected error", name)
	case strings.HasPrefix(action, "sleep(") && strings.HasSuffix(action, ")"):
		d, err := time.ParseDuration(action[len("sleep(") : len(action)-1])
		if err == nil {
			time.Sleep(d)
		}
	}
	return nil
}

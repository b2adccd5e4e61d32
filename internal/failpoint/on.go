//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

var actions = parse(os.Getenv("TANDEM_FAILPOINTS"))

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
	action, ok := actions[name]
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

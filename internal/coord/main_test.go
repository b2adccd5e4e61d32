package coord

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// phase-2 driver, scan loop and pool must stop in Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's opener goroutine exits asynchronously after DB.Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

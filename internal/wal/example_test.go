package wal_test

import (
	"fmt"
	"log"
	"os"

	"github.com/tandem-tx/tandem/internal/wal"
)

const recCommit wal.Type = 1

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "wal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// First run: an empty log.
	l, err := wal.Open(wal.Options{Dir: dir}, nil)
	if err != nil {
		log.Fatal(err)
	}
	pos, err := l.Append(recCommit, []byte("gtrid-1"))
	if err != nil {
		log.Fatal(err) // in the coordinator: ErrOutcomeUnknown / ErrLogFailed mean restart
	}
	fmt.Println("durable at", pos)
	l.Close()

	// Restart: replay rebuilds the coordinator's state.
	l, err = wal.Open(wal.Options{Dir: dir}, func(pos wal.Position, typ wal.Type, payload []byte) error {
		fmt.Printf("replay %v type %d %s\n", pos, typ, payload)
		return nil
	})
	if err != nil {
		log.Fatal(err) // a *wal.CorruptionError says which file and offset
	}
	defer l.Close()
	// Output:
	// durable at 1:32
	// replay 1:32 type 1 gtrid-1
}

package main

import (
	"os"
	"strings"
	"testing"
)

// The README shows this program in full: it must be this file, as it is.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(prog)+"```\n") {
		t.Fatal("README.md's \"A first program\" is not examples/hello/main.go as it is: paste the file again")
	}
}

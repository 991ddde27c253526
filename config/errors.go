package config

import (
	"fmt"
	"strings"
)

// Error is one problem found in a config file. It carries the file and line
// rather than a YAML path because operators fix configs in an editor, and
// `validate` prints it in the FILE:LINE form editors and CI annotators jump to.
type Error struct {
	File string
	// Line is 1-based; 0 means the problem is not tied to a line (the file
	// could not be read at all).
	Line int
	Msg  string
}

// Error formats the problem as FILE:LINE: message.
func (e Error) Error() string {
	if e.Line <= 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Errors is every problem found in one file. Load reports all of them at
// once so an operator fixes a config in one round instead of one error per run.
type Errors struct {
	// List is ordered by line; problems on the same line keep the order in
	// which they were found.
	List []Error
}

// Error prints one FILE:LINE: message per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, err := range e.List {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Write writes the history as one JSON object (snake_case field names;
// outcomes and isolation levels as strings such as "ok" and
// "read_committed"), followed by a newline. ReadHistory reads it back.
func (h *History) Write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := json.NewEncoder(bw).Encode(h); err != nil {
		return fmt.Errorf("writing history: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing history: %w", err)
	}
	return nil
}

// ReadHistory reads a history that History.Write wrote. Unknown fields are
// an error, so a file of another format is not taken for an empty history.
func ReadHistory(r io.Reader) (History, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<16))
	dec.DisallowUnknownFields()
	var h History
	if err := dec.Decode(&h); err != nil {
		return History{}, fmt.Errorf("reading history: %w", err)
	}
	if dec.More() {
		return History{}, fmt.Errorf("reading history: more than one JSON value")
	}
	return h, nil
}

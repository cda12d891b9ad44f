package contract

import (
	"fmt"
	"unicode/utf8"
)

// MaxTopicBytes is the longest topic name accepted, in bytes: 249, the same
// limit as Kafka's topic names.
const MaxTopicBytes = 249

// ValidateTopic checks a topic name: segments separated by '.', each one or more of [A-Za-z0-9_-], at most 249 bytes in all. So "..",
// a leading or trailing '.', '/', NUL and the empty name are all refused,
// and a valid name is always a safe directory name. The error says what is
// wrong and is meant for the client (HTTP 400).
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is empty")
	case len(name) > MaxTopicBytes:
		return fmt.Errorf("topic name is %d bytes, the maximum is %d", len(name), MaxTopicBytes)
	}
	segStart := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if i == segStart {
				return fmt.Errorf("topic name %s has an empty segment at byte %d (segments are separated by single dots)", quote(name), i)
			}
			segStart = i + 1
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("topic name %s has an invalid character %s at byte %d (allowed: A-Z a-z 0-9 _ - and . between segments)", quote(name), quoteByte(name, i), i)
		}
	}
	if segStart == len(name) {
		return fmt.Errorf("topic name %s ends with '.'", quote(name))
	}
	if name == DispatchersFile || name == DispatchersFile+".tmp" {
		return fmt.Errorf("topic name %s is reserved: the data root keeps the dispatchers created through the admin API in %s, beside the topics' directories", quote(name), DispatchersFile)
	}
	if name == PausedFile || name == PausedFile+".tmp" {
		return fmt.Errorf("topic name %s is reserved: the data root keeps the paused dispatchers in %s, beside the topics' directories", quote(name), PausedFile)
	}
	return nil
}

// DispatchersFile is the file, in the local backend's data root, that holds
// the dispatchers created through the admin API (the newest Java mmmq's
// dispatchers.json; written through DispatchersFile+".tmp"). The topics'
// directories share that root, so ValidateTopic refuses both names as
// topic names, on every backend (one rule above the seam).
const DispatchersFile = "dispatchers.json"

// PausedFile is the file, in the data root, that records every paused
// dispatcher (declared in the configuration, in Go or through the admin
// API) with the reason and time of its pause, so that a pause survives a
// restart (written through PausedFile+".tmp"); reserved as a topic name
// as DispatchersFile is.
const PausedFile = "paused.json"

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}

func quoteByte(s string, i int) string {
	r, _ := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError {
		return fmt.Sprintf("0x%02x", s[i])
	}
	return fmt.Sprintf("%q", r)
}

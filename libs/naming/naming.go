// Package naming checks the names users choose: topics, consumer groups and
// transactional ids. Topic names follow Kafka's rules so that topics move
// between the two systems unchanged.
package naming

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxTopicLength is the longest topic name Kafka accepts.
const MaxTopicLength = 249

// ValidateTopic checks a topic name: 1 to 249 characters from
// [a-zA-Z0-9._-], and not "." or "..". The error says what is wrong; an
// illegal character is named as a character, with its position counted in
// characters from 0, not in bytes (UTF-8 names are common and every
// non-ASCII character is illegal).
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name cannot be %q", name)
	}
	pos := 0
	for i, r := range name {
		if r < utf8.RuneSelf && legalTopicByte(byte(r)) {
			pos++
			continue
		}
		what := fmt.Sprintf("the illegal character %q (%U)", r, r)
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(name[i:]); size == 1 {
				what = fmt.Sprintf("the byte 0x%02x, which is not UTF-8,", name[i])
			}
		}
		return fmt.Errorf("topic name %q has %s at position %d (counting characters from 0); use only ASCII letters, digits, '.', '_' and '-'",
			name, what, pos)
	}
	if pos > MaxTopicLength {
		return fmt.Errorf("topic name is %d characters long; the maximum is %d", pos, MaxTopicLength)
	}
	return nil
}

func legalTopicByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
}

// TopicCollisionKey maps a topic name to the key under which names collide:
// Kafka's metric names replace '.' with '_', so "a.b" and "a_b" cannot
// coexist.
func TopicCollisionKey(name string) string { return strings.ReplaceAll(name, ".", "_") }

// IsInternalTopic reports whether a topic is internal to Sluice (offsets,
// transaction state). Internal topics start with "__".
func IsInternalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// ValidateGroupID checks a consumer group id: non-empty, at most 255 bytes.
func ValidateGroupID(id string) error {
	if id == "" {
		return fmt.Errorf("group id is empty")
	}
	if len(id) > 255 {
		return fmt.Errorf("group id is %d bytes long; the maximum is 255", len(id))
	}
	return nil
}

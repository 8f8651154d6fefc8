// Package markup holds the module's one reading of the spec 7.4 rule that
// a message's text holds no JSON or HTML markup (structure goes in data):
// the SDK warns about, or refuses, an agent's text that breaks it
// (PA-7.4-04), the fake Company refuses it (CO-7.4-03's mirror), and
// poppycheck judges a Company Agent's text by it (CO-7.4-03). One reading,
// so that the check never fails a Company for text the SDK itself would
// send.
package markup

import (
	"encoding/json"
	"regexp"
	"strings"
)

// tagRE is an HTML start or end tag: "<" then a letter or "/".
var tagRE = regexp.MustCompile(`<[A-Za-z/][^>]*>`)

// In reports whether text holds markup: the whole text, trimmed, is a JSON
// object or array, or it holds an HTML tag.
func In(text string) bool {
	t := strings.TrimSpace(text)
	if (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
		return true
	}
	return tagRE.MatchString(text)
}

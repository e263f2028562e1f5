package layout

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Quote is a file name or path as messages print it, the way git prints
// paths: as it is when it is plain printable text, and otherwise in double
// quotes with Go's escapes (\n, \t, \x.., \u....), so that a name holding a
// newline stays on the message's one line, and one holding a quote, a
// backslash, an invisible character or bytes that are not UTF-8 can be
// told apart from its neighbours.
func Quote(name string) string {
	if !utf8.ValidString(name) {
		return strconv.Quote(name)
	}
	for _, r := range name {
		if r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

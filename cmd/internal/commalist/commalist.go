// Package commalist reads the comma-separated lists that flags and headers take.
package commalist

import "strings"

// Split returns the items of a comma-separated list, each trimmed of white space, empty
// ones dropped ("a, b,,c" is a, b, c).
func Split(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

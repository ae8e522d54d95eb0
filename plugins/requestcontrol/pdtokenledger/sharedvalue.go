package pdtokenledger

import (
	"fmt"
	"strconv"
	"strings"
)

// The shared ledger's Redis values, one per replica (the hash field) and pod (the key).

// FormatSharedValue renders a replica's decode state of one pod: "<tokens>,<charges>,<sumat>"
// (sumat: Σ charge times in Unix seconds on the Redis clock).
func FormatSharedValue(tokens float64, charges int, sumAt float64) string {
	return strconv.FormatFloat(tokens, 'f', -1, 64) + "," + strconv.Itoa(charges) + "," + strconv.FormatFloat(sumAt, 'f', 3, 64)
}

// ParseSharedValue parses FormatSharedValue's format.
func ParseSharedValue(v string) (tokens float64, charges int, sumAt float64, err error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("shared ledger value %q: want <tokens>,<charges>,<sumat>", v)
	}
	if tokens, err = strconv.ParseFloat(parts[0], 64); err != nil || !validTokens(tokens) {
		return 0, 0, 0, fmt.Errorf("shared ledger value %q: bad tokens", v)
	}
	if charges, err = strconv.Atoi(parts[1]); err != nil || charges < 0 {
		return 0, 0, 0, fmt.Errorf("shared ledger value %q: bad charges", v)
	}
	if sumAt, err = strconv.ParseFloat(parts[2], 64); err != nil || !validTokens(sumAt) {
		return 0, 0, 0, fmt.Errorf("shared ledger value %q: bad sumat", v)
	}
	return tokens, charges, sumAt, nil
}

// FormatSharedPrefill renders a replica's open prefill active parts on one pod:
// "<tokens>,<legs>".
func FormatSharedPrefill(tokens float64, legs int) string {
	return strconv.FormatFloat(tokens, 'f', -1, 64) + "," + strconv.Itoa(legs)
}

// ParseSharedPrefill parses FormatSharedPrefill's format.
func ParseSharedPrefill(v string) (tokens float64, legs int, err error) {
	return parsePair(v, "prefill", "tokens", "legs")
}

// FormatSharedBudget renders a replica's output budgets on one pod: "<output>,<budgeted>"
// (Σ output budgets of the open decode charges that carry one, and how many carry one).
func FormatSharedBudget(output float64, budgeted int) string {
	return strconv.FormatFloat(output, 'f', -1, 64) + "," + strconv.Itoa(budgeted)
}

// ParseSharedBudget parses FormatSharedBudget's format.
func ParseSharedBudget(v string) (output float64, budgeted int, err error) {
	return parsePair(v, "budget", "output", "budgeted")
}

// parsePair parses "<float>,<count>" (both ≥ 0).
func parsePair(v, what, first, second string) (x float64, n int, err error) {
	parts := strings.Split(v, ",")
	if len(parts) != 2 {
		return 0, 0, fmt.Errorf("shared ledger %s %q: want <%s>,<%s>", what, v, first, second)
	}
	if x, err = strconv.ParseFloat(parts[0], 64); err != nil || !validTokens(x) {
		return 0, 0, fmt.Errorf("shared ledger %s %q: bad %s", what, v, first)
	}
	if n, err = strconv.Atoi(parts[1]); err != nil || n < 0 {
		return 0, 0, fmt.Errorf("shared ledger %s %q: bad %s", what, v, second)
	}
	return x, n, nil
}

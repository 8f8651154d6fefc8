package markup

import "testing"

// PA-7.4-04: JSON or HTML in a text is markup; prose with brackets, or
// with "<" and ">" as comparisons, is not.
func TestIn(t *testing.T) {
	for text, want := range map[string]bool{
		`{"size": "M"}`:              true,
		`  [1, 2] `:                  true,
		"<b>hello</b>":               true,
		"see </div> here":            true,
		"plain text":                 false,
		"{not json}":                 false,
		"[sic] the order shipped":    false,
		"3 < 4 and 5 > 2":            false,
		"Your total: {amount} euros": false,
	} {
		if got := In(text); got != want {
			t.Errorf("In(%q) = %v, want %v", text, got, want)
		}
	}
}

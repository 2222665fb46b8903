package yamlconf

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// days finds a count of days or weeks written in words ("3 days", "1w").
var days = regexp.MustCompile(`^\s*(\d{1,5})\s*(d|days?|w|weeks?)\s*$`)

// ParseDuration reads a Go duration ("90s", "10m", "72h"). Its error
// quotes the value and says what to write instead: "3 days" suggests
// 72h, a bare number its unit.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	hint := "use a number and a unit: 90s, 10m, 72h"
	if m := days.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		if m[2][0] == 'w' {
			n *= 7
		}
		hint = fmt.Sprintf("use %dh", 24*n)
	} else if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		hint = fmt.Sprintf("use %ss, with its unit", s)
	}
	return 0, fmt.Errorf("%s is not a duration (%s)", quote(s), hint)
}

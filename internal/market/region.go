package market

import "strings"

// RegionOf returns the region a zone belongs to, the failure domain above the
// zone, from the zone's name alone:
//
//   - AWS: an Availability Zone is its region and a letter (us-east-1f →
//     us-east-1, us-gov-west-1a → us-gov-west-1); a Local Zone or Wavelength
//     Zone is its parent region, a dash and more (us-west-2-lax-1a,
//     us-east-1-wl1-bos-wlz-1 → us-west-2, us-east-1). An AWS region is
//     recognised by its shape: lower-case words ending in a direction (east,
//     west, north, south, central, northeast, ...), then a number.
//   - GCP (and other clouds with the same shape): the region, whose last word
//     ends in a number, a dash and a letter (us-central1-a → us-central1,
//     europe-west4-b → europe-west4).
//   - Tencent Cloud: the region, a dash and a number (ap-guangzhou-3 →
//     ap-guangzhou, na-siliconvalley-1 → na-siliconvalley, ap-shanghai-fsi-1
//     → ap-shanghai-fsi); also AKS's zone labels (eastus-1 → eastus).
//
// Any other name, such as an Azure zone ("1", "2", "3", which says nothing of
// its region), a region's own name, an AWS zone ID (use1-az1) or a made-up
// name, is its own region. The result is always a prefix of zone, and
// RegionOf(RegionOf(z)) == RegionOf(z).
func RegionOf(zone string) string {
	for {
		r := regionStep(zone)
		if r == zone {
			return r
		}
		zone = r
	}
}

// regionStep strips one zone suffix from z, or returns z. Real zone names
// need one step; RegionOf repeats it so that its result is a fixed point
// whatever the input.
func regionStep(z string) string {
	if r, ok := awsRegion(z); ok {
		return r
	}
	i := strings.LastIndexByte(z, '-')
	if i <= 0 {
		return z
	}
	rest, last := z[:i], z[i+1:]
	j := strings.LastIndexByte(rest, '-') // -1: rest is one word
	prev := rest[j+1:]
	switch {
	case last != "" && isLower(last) && j > 0 && isWordNumber(prev) && isWords(rest[:j]):
		// GCP: us-central1-a.
		return rest
	case isDigits(last) && prev != "" && isLower(prev[:1]) && isAlnum(prev) && (j < 0 || isWords(rest[:j])):
		// Tencent: ap-guangzhou-3; AKS: eastus-1, westus2-3.
		return rest
	}
	return z
}

// awsRegion returns the AWS region z names or is a zone of: words of
// lower-case letters, the last of them a direction, at least one before it,
// then a number; after the number, the letters of an Availability Zone, or
// a dash and anything (a Local Zone or Wavelength Zone). ok is false when z
// does not start with an AWS region.
func awsRegion(z string) (region string, ok bool) {
	words, prev := 0, ""
	for start := 0; start <= len(z); {
		end := strings.IndexByte(z[start:], '-')
		if end < 0 {
			end = len(z)
		} else {
			end += start
		}
		seg := z[start:end]
		if seg != "" && isDigit(seg[0]) {
			if words < 2 || !awsDirections[prev] {
				return "", false
			}
			d := 1
			for d < len(seg) && isDigit(seg[d]) {
				d++
			}
			switch {
			case end == len(z) && isLower(seg[d:]):
				return z[:start+d], true // us-east-1, us-east-1f
			case end < len(z) && d == len(seg):
				return z[:end], true // us-west-2-lax-1a
			}
			return "", false
		}
		if seg == "" || !isLower(seg) {
			return "", false
		}
		words, prev = words+1, seg
		start = end + 1
	}
	return "", false
}

// awsDirections are the last words of AWS region names before the number
// (us-east-1, ap-northeast-3, ca-central-1, us-gov-west-1, eusc-de-east-1).
var awsDirections = map[string]bool{
	"east": true, "west": true, "north": true, "south": true, "central": true,
	"northeast": true, "northwest": true, "southeast": true, "southwest": true,
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' }

// isLower reports whether s is lower-case ASCII letters (true for "").
func isLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLetter(s[i]) {
			return false
		}
	}
	return true
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// isAlnum reports whether s is one or more lower-case letters and digits.
func isAlnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLetter(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// isWordNumber reports whether s is letters then digits, as the last word of
// a GCP region (central1, west4, northeast1).
func isWordNumber(s string) bool {
	i := 0
	for i < len(s) && isLetter(s[i]) {
		i++
	}
	return i > 0 && isDigits(s[i:])
}

// isWords reports whether s is one or more dash-separated words of
// lower-case letters and digits.
func isWords(s string) bool {
	for {
		i := strings.IndexByte(s, '-')
		if i < 0 {
			return isAlnum(s)
		}
		if !isAlnum(s[:i]) {
			return false
		}
		s = s[i+1:]
	}
}

package aws

import (
	"math"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// FuzzOwnerFromTags: tags come from EC2 and anyone with access to the
// account can write them. Reading them never panics, yields a usable port,
// and what Launch writes reads back unchanged even among foreign tags.
func FuzzOwnerFromTags(f *testing.F) {
	f.Add("prod", "chat", "0123456789abcdef", uint16(8080), true, "team", "ml", TagPool, "x")
	f.Add("", "", "", uint16(0), false, TagServingPort, "-1", TagManagedBy, "nope")
	f.Add("c", "p", "t", uint16(65535), false, "Name", "n", TagServingPort, "65536")
	f.Fuzz(func(t *testing.T, cluster, pool, token string, port uint16, private bool, k1, v1, k2, v2 string) {
		foreign := []types.Tag{{Key: aws.String(k1), Value: aws.String(v1)}, {Key: aws.String(k2), Value: nil}, {Key: nil, Value: aws.String(v2)}}
		o := ownerFromTags(foreign)
		if o.Port < 1 || o.Port > math.MaxUint16 {
			t.Fatalf("port %d from %q=%q", o.Port, k1, v1)
		}
		if o.ours(cluster) && !(k1 == TagManagedBy && v1 == ManagedByValue) {
			t.Fatalf("owned without the managed-by tag: %+v", o)
		}

		want := owner{Managed: true, Cluster: cluster, Pool: pool, Token: token, Port: int32(port), UsePrivate: private}
		if port == 0 {
			want.Port = DefaultServingPort
		}
		// Foreign tags first: ours are written last and win.
		tags := append(foreign[:1:1], ownershipTags(want)...)
		got := ownerFromTags(tags)
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
		if !got.ours(cluster) || got.ours(cluster+"x") {
			t.Fatalf("ours(%q) wrong for %+v", cluster, got)
		}
		for _, tag := range ownershipTags(want) {
			if aws.ToString(tag.Key) == TagName && utf8.RuneCountInString(aws.ToString(tag.Value)) > maxTagValue {
				t.Fatalf("Name tag too long: %d", len(aws.ToString(tag.Value)))
			}
		}
	})
}

// FuzzParsePrice: spot prices are strings from EC2. An accepted price is a
// finite non-negative number that survives formatting.
func FuzzParsePrice(f *testing.F) {
	for _, s := range []string{"0.401200", "1", "", "-1", "NaN", "+Inf", "1e308", "0x1p-2", " 3 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parsePrice(s)
		if !ok {
			if v != 0 {
				t.Fatalf("rejected %q but returned %v", s, v)
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("accepted %q as %v", s, v)
		}
		again, ok := parsePrice(strconv.FormatFloat(v, 'f', -1, 64))
		if !ok || again != v {
			t.Fatalf("%q: %v does not survive formatting (%v, %v)", s, v, again, ok)
		}
	})
}

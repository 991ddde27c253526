package config

import "testing"

// Valid listen forms must stay accepted by the new port checks.
func TestReviewListenFormsAccepted(t *testing.T) {
	act := "activities:\n" + cliRTAct("a1", `{ path: "/buy/{sku}" }`)
	for _, l := range [][2]string{
		{"[::1]:8080", "[::1]:9090"},
		{":0", ":0"},
		{"0.0.0.0:0", "127.0.0.1:0"},
		{"[::1]:8080", "127.0.0.1:8080"},
		{"[fe80::1%lo]:8080", "127.0.0.1:9090"},
	} {
		give := "listen: \"" + l[0] + "\"\nadmin: { listen: \"" + l[1] + "\" }\n" + cliRTHead + act
		if errs := cliRTParse(t, give); errs != nil {
			t.Errorf("listen %s, admin %s: %v", l[0], l[1], errs)
		}
	}
}

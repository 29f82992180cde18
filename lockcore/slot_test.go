package lockcore

import "testing"

func TestFenceSlotIsTheRedisClusterSlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7 (and the Cluster spec's test vector).
	for _, tc := range []struct {
		name string
		slot int
	}{
		{"123456789", 0x31C3 % FenceSlots},
		{"foo", 12182},
		{"bar", 5061},
		{"orders:42", FenceSlot("orders:42")},
	} {
		if got := FenceSlot(tc.name); got != tc.slot {
			t.Errorf("FenceSlot(%q) = %d, want %d", tc.name, got, tc.slot)
		}
	}
}

func TestEverySlotHasATagThatHashesToIt(t *testing.T) {
	seen := map[string]bool{}
	for s := range FenceSlots {
		tag := SlotTag(s)
		if FenceSlot(tag) != s {
			t.Fatalf("SlotTag(%d) = %q hashes to %d", s, tag, FenceSlot(tag))
		}
		if seen[tag] || len(tag) > 4 {
			t.Fatalf("SlotTag(%d) = %q: repeated or longer than 4", s, tag)
		}
		seen[tag] = true
	}
}

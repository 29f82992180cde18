package lockcore

import "strconv"

// FenceSlots is the number of fencing counters a node keeps: one per Redis
// Cluster hash slot. Every resource maps to one slot (FenceSlot), and all
// resources of a slot share its counter, so a node's memory for counters is
// a constant, whatever the number of distinct names ever locked.
const FenceSlots = 16384

// FenceSlot returns the slot of resource: CRC16 (XMODEM) of the name mod
// 16384, which is the Redis Cluster slot of any key whose hash tag is the
// resource name, so a node's counter for the resource and its lock can live
// in the same Cluster slot.
func FenceSlot(resource string) int {
	return int(crc16(resource) % FenceSlots)
}

// SlotTag returns a short string whose FenceSlot is slot, for use as the
// hash tag of a key that must live in that slot. It panics when slot is out
// of range.
func SlotTag(slot int) string { return slotTags[slot] }

// slotTags holds, for each slot, the first of "0", "1", …, "z", "00", …
// (base 36) that hashes to it.
var slotTags = func() []string {
	tags := make([]string, FenceSlots)
	left := FenceSlots
	for i := 0; left > 0; i++ {
		s := strconv.FormatInt(int64(i), 36)
		if slot := FenceSlot(s); tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return tags
}()

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the hash of
// Redis Cluster.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

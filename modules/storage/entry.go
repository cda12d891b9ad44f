package storage

// Entry is one message read back from the log: its offset and the stored
// message JSON. Payload must not be modified; it may share a read buffer
// with the other entries of the same batch.
type Entry struct {
	Offset  int64
	Payload []byte
}

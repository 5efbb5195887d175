package testtool

// ForeignValues are what a reply sent where it should not go writes into a
// bucket or row: a decode
// reply, a text reply of IDs, a binary ID, an error sentence, and nothing.
var ForeignValues = []string{
	`{"id":"1862213154793730049","time":"2024-11-22T06:37:13.123Z","timestamp_ms":1732257433123,"worker_id":1,"sequence":5}`,
	"1862213154793730049",
	"1862213154793730049\n1862213154793730050",
	"\x19\xd8\x8e\x9a\x00\x40\x00\x05",
	"vending: bad count: the request body must be empty (one ID) or a whole number from 1 to 10000",
	"",
	"{}",
	"null",
	`{"max_id":0,"step":0}`,
	`{"epoch":0}`,
}

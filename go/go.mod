module xce

go 1.19

package postgres

// Statement returns the text of sql/NAME.sql, for tests that read its plan.
func Statement(name string) string {
	b, err := sqlFS.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(err)
	}
	return string(b)
}

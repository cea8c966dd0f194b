"""PostgreSQL access: the only package that imports psycopg2."""

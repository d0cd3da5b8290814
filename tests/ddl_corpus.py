"""A DDL corpus from the MariaDB and MySQL reference manuals' CREATE TABLE / ALTER TABLE
grammar: every clause that changes a table's columns or key, the type names and aliases,
DEFAULT forms, quoting and case variants, comments, several changes per statement.

Each group is one table (``{t}``, in database ``{db}``) made by ``base``, given ``rows``,
then changed by its statements in order. A statement whose effect binlake cannot know
from its text names, in ``unknown``, a word of the reason binlake must give.
tests/test_ddl_corpus.py runs every statement on the server and compares binlake's view
with the server's; the stream test runs the groups through the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    sql: str
    unknown: str = ""  # the effect cannot be known from the text: a word of the reason binlake gives


@dataclass(frozen=True)
class Group:
    name: str
    base: str
    rows: tuple[str, ...]
    cases: tuple[Case, ...]

    @property
    def knowable(self) -> bool:
        """Whether binlake can follow every statement of the group."""
        return not any(c.unknown for c in self.cases)


def _cases(*items: str | tuple[str, str]) -> tuple[Case, ...]:
    return tuple(Case(i) if isinstance(i, str) else Case(*i) for i in items)


ROWS = ("INSERT INTO {t} (id) VALUES (1), (2)",)

GROUPS = (
    Group("add", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
          ("INSERT INTO {t} VALUES (1, 10, 'x'), (2, NULL, NULL)",), _cases(
              "ALTER TABLE {t} ADD c1 INT",
              "ALTER TABLE {t} ADD COLUMN c2 VARCHAR(20) NOT NULL",
              "ALTER TABLE {t} ADD COLUMN c3 INT FIRST",
              "ALTER TABLE {t} ADD COLUMN c4 INT AFTER a",
              "ALTER TABLE {t} ADD c5 INT DEFAULT 5 AFTER `id`",
              "ALTER TABLE {t} ADD COLUMN (c6 VARCHAR(45), c7 VARCHAR(55))",
              "ALTER TABLE {t} ADD (c8 INT NOT NULL DEFAULT 8, INDEX i8 (c8), c9 DATE)",
              "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS c6 INT",
              "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS c10 INT",
              "ALTER TABLE {t} ADD c11 INT, ADD c12 INT FIRST, ADD c13 INT AFTER c11",
              "ALTER TABLE {t} ADD `select` INT, ADD `Order` INT, ADD `key` INT, ADD `from` INT",
              "ALTER TABLE {t} ADD `a``b` INT, ADD `ä ü` VARCHAR(3), ADD `日本` INT, ADD `1abc` INT, ADD `$x` INT",
              "ALTER TABLE {t} ADD 2abc INT, ADD d$ INT, ADD über INT",
              "ALTER TABLE {t} ADD c14 BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'x, y (z)'",
              "ALTER TABLE {t} ADD c15 INT NULL DEFAULT NULL",
              "ALTER TABLE {t} ADD c16 INT /* a comment, with a comma */ AFTER a -- tail comment",
              "ALTER TABLE {t} /*!40101 ADD c17 INT */",
              "ALTER TABLE {t} /*M!100301 ADD c18 INT, */ ADD c19 INT # hash comment",
              "ALTER TABLE {t} ADD c20 INT, ALGORITHM=INPLACE, LOCK=NONE",
              "ALTER TABLE {t} ADD c21 INT, ALGORITHM=INSTANT",
              "ALTER TABLE {t} ALGORITHM=COPY, LOCK=SHARED, ADD c22 INT",
              "ALTER TABLE {t} ADD COLUMN c23 INT AFTER C11",
              "ALTER ONLINE TABLE {t} ADD c24 INT",
              "ALTER IGNORE TABLE {t} ADD c25 INT",
              "ALTER TABLE {db}.{t} ADD c26 INT",
              "ALTER TABLE `{db}`.`{t}` ADD c27 INT",
              "alter table {t} add c28 int not null default 28 after c27",
              "ALTER TABLE {t} WAIT 5 ADD c29 INT",
              "ALTER TABLE {t} NOWAIT ADD c30 INT",
              "ALTER TABLE IF EXISTS {t} ADD c31 INT",
              "ALTER TABLE {t} ADD c32 INT, ADD INDEX (c32), ADD UNIQUE KEY u32 (c32)",
              "ALTER TABLE {t}\n  ADD COLUMN c33 INT,\n  ADD COLUMN c34 INT\n",
              "ALTER TABLE {t} ADD c35 INT;",
              "ALTER TABLE {t} ADD COLUMN c36 INT INVISIBLE",
              "ALTER TABLE {t} ADD c37 INT CHECK (c37 > 0), ADD c38 INT REFERENCES {t} (id)",
              "ALTER TABLE {t} ADD c39 VARCHAR(10) COLLATE utf8mb4_bin NOT NULL DEFAULT 'z' COMMENT 'c'",
          )),
    Group("types", "CREATE TABLE {t} (id INT PRIMARY KEY)", ROWS, _cases(
        "ALTER TABLE {t} ADD i1 TINYINT, ADD i2 SMALLINT, ADD i3 MEDIUMINT, ADD i4 INT, ADD i5 BIGINT, ADD i6 INTEGER",
        "ALTER TABLE {t} ADD u1 TINYINT UNSIGNED, ADD u2 SMALLINT UNSIGNED, ADD u3 MEDIUMINT UNSIGNED, "
        "ADD u4 INT UNSIGNED, ADD u5 BIGINT UNSIGNED, ADD u6 INT SIGNED",
        "ALTER TABLE {t} ADD z1 INT(5) ZEROFILL, ADD z2 TINYINT(3) UNSIGNED ZEROFILL, ADD z3 BIGINT(20), "
        "ADD z4 INT(11) UNSIGNED",
        "ALTER TABLE {t} ADD b1 BOOL, ADD b2 BOOLEAN",
        "ALTER TABLE {t} ADD a1 INT1, ADD a2 INT2, ADD a3 INT3, ADD a4 INT4, ADD a8 INT8, ADD m MIDDLEINT",
        "ALTER TABLE {t} ADD d1 DECIMAL, ADD d2 DECIMAL(5), ADD d3 DECIMAL(20,6), ADD d4 DEC(4,1), "
        "ADD d5 NUMERIC(7,3), ADD d6 FIXED(6,1), ADD d7 DECIMAL(40,10), ADD d8 DECIMAL(5,2) UNSIGNED ZEROFILL, "
        "ADD d9 DECIMAL(65,30), ADD d10 DECIMAL(38, 2) UNSIGNED",
        "ALTER TABLE {t} ADD f1 FLOAT, ADD f2 FLOAT(10,2), ADD f3 FLOAT(20), ADD f4 FLOAT(30), ADD f5 FLOAT UNSIGNED, "
        "ADD f6 FLOAT4, ADD f7 FLOAT8, ADD f8 DOUBLE, ADD f9 DOUBLE PRECISION, ADD f10 DOUBLE(10,3), ADD f11 REAL, "
        "ADD f12 REAL(8,2), ADD f13 DOUBLE UNSIGNED, ADD f14 DOUBLE PRECISION(6,2) UNSIGNED ZEROFILL",
        "ALTER TABLE {t} ADD t1 BIT, ADD t2 BIT(1), ADD t3 BIT(7), ADD t4 BIT(64)",
        "ALTER TABLE {t} ADD s1 CHAR, ADD s2 CHAR(10), ADD s3 VARCHAR(255), ADD s4 VARCHAR(0), ADD s5 CHARACTER(3), "
        "ADD s6 CHAR VARYING(7), ADD s7 CHARACTER VARYING(8)",
        "ALTER TABLE {t} ADD n1 NATIONAL CHAR(3), ADD n2 NCHAR(4), ADD n3 NVARCHAR(5), ADD n4 NATIONAL VARCHAR(6), "
        "ADD n5 NCHAR VARYING(9), ADD n6 NATIONAL CHARACTER VARYING(2), ADD n7 NATIONAL CHARACTER(2)",
        "ALTER TABLE {t} ADD c1 VARCHAR(5) CHARACTER SET latin1, ADD c2 VARCHAR(5) CHARSET ascii, "
        "ADD c3 VARCHAR(5) ASCII, ADD c4 VARCHAR(5) UNICODE, ADD c5 CHAR(5) BINARY, "
        "ADD c6 VARCHAR(5) COLLATE utf8mb4_bin, ADD c7 VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
        "ALTER TABLE {t} ADD y1 VARCHAR(5) CHARACTER SET binary, ADD y2 CHAR(5) BYTE, ADD y3 TEXT CHARACTER SET binary, "
        "ADD y4 CHAR(4) CHARACTER SET 'binary'",
        "ALTER TABLE {t} ADD x1 BINARY, ADD x2 BINARY(16), ADD x3 VARBINARY(20)",
        "ALTER TABLE {t} ADD e1 TINYTEXT, ADD e2 TEXT, ADD e3 TEXT(100), ADD e4 TEXT(1000) CHARACTER SET latin1, "
        "ADD e5 MEDIUMTEXT, ADD e6 LONGTEXT, ADD e7 LONG, ADD e8 LONG VARCHAR, ADD e9 TEXT(20000), "
        "ADD e10 TEXT(100) CHARACTER SET latin1, ADD e11 LONG CHAR VARYING",
        "ALTER TABLE {t} ADD l1 TINYBLOB, ADD l2 BLOB, ADD l3 BLOB(300), ADD l4 BLOB(70000), ADD l5 MEDIUMBLOB, "
        "ADD l6 LONGBLOB, ADD l7 LONG VARBINARY, ADD l8 BLOB(200)",
        "ALTER TABLE {t} ADD j JSON",
        "ALTER TABLE {t} ADD v1 ENUM('a','b'), ADD v2 ENUM('x''y', 'z', 'with,comma'), ADD v3 SET('a','b','c'), "
        "ADD v4 ENUM('é', 'ü') CHARACTER SET utf8mb4",
        "ALTER TABLE {t} ADD w1 DATE, ADD w2 TIME, ADD w3 TIME(3), ADD w4 DATETIME, ADD w5 DATETIME(6), "
        "ADD w6 TIMESTAMP, ADD w7 TIMESTAMP(2) NULL, ADD w8 YEAR, ADD w9 YEAR(4)",
        "ALTER TABLE {t} ADD g1 GEOMETRY, ADD g2 POINT, ADD g3 LINESTRING, ADD g4 POLYGON, ADD g5 MULTIPOINT, "
        "ADD g6 MULTILINESTRING, ADD g7 MULTIPOLYGON, ADD g8 GEOMETRYCOLLECTION",
        "ALTER TABLE {t} ADD h1 INET4, ADD h2 INET6, ADD h3 UUID",
        "ALTER TABLE {t} ADD k1 int(10) unsigned, ADD k2 varchar(20) character set utf8mb4 collate utf8mb4_bin, "
        "ADD k3 Decimal(8, 3), ADD k4 enum('A','B') NOT NULL",
    )),
    Group("defaults", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT)", ("INSERT INTO {t} VALUES (1, 5), (2, NULL)",),
          _cases(
              "ALTER TABLE {t} ADD d1 INT DEFAULT ' 31 '",
              "ALTER TABLE {t} ADD d2 DECIMAL(5,2) DEFAULT '1.50', ADD d3 DECIMAL(5,2) DEFAULT ' 1.5 '",
              "ALTER TABLE {t} ADD d4 INT DEFAULT 0x41, ADD d5 VARCHAR(5) DEFAULT 0x41, ADD d6 VARBINARY(3) DEFAULT x'4142'",
              "ALTER TABLE {t} ADD d7 INT DEFAULT b'101', ADD d8 BIT(8) DEFAULT b'101', ADD d9 BIT DEFAULT b'1'",
              "ALTER TABLE {t} ADD d10 INT DEFAULT TRUE, ADD d11 VARCHAR(5) DEFAULT TRUE, ADD d12 BOOLEAN DEFAULT FALSE",
              "ALTER TABLE {t} ADD d13 INT DEFAULT (1+1), ADD d14 INT DEFAULT (2 * 3 - (1)), ADD d15 VARCHAR(3) DEFAULT ('q')",
              "ALTER TABLE {t} ADD d16 VARCHAR(10) DEFAULT 'x' COLLATE utf8mb4_bin",
              "ALTER TABLE {t} ADD d17 VARCHAR(10) COLLATE utf8mb4_bin DEFAULT 'y'",
              "ALTER TABLE {t} ADD d18 DOUBLE DEFAULT '1e3', ADD d19 DOUBLE DEFAULT 1e3, ADD d20 DOUBLE DEFAULT ' 2.5 '",
              "ALTER TABLE {t} ADD d21 INT DEFAULT '3.7', ADD d22 INT DEFAULT 2.5, ADD d23 INT DEFAULT -2.5, "
              "ADD d24 INT DEFAULT '  -7  '",
              "ALTER TABLE {t} ADD d25 TINYINT DEFAULT '-0', ADD d26 INT DEFAULT -5, ADD d27 INT DEFAULT +5, "
              "ADD d28 INT DEFAULT - 5",
              "ALTER TABLE {t} ADD d29 CHAR(3) DEFAULT 'ab ', ADD d30 VARCHAR(3) DEFAULT 'ab '",
              "ALTER TABLE {t} ADD d31 DATE DEFAULT '2020-1-2', ADD d32 DATE DEFAULT 20200102, "
              "ADD d33 DATE DEFAULT '2021/03/04', ADD d34 DATE DEFAULT '0000-00-00', ADD d35 DATE DEFAULT DATE '2022-05-06'",
              "ALTER TABLE {t} ADD d36 DATETIME DEFAULT 20200102030405, ADD d37 DATETIME(3) DEFAULT '2020-01-02 03:04:05.6789', "
              "ADD d38 DATETIME DEFAULT '2020-01-02', ADD d39 DATETIME DEFAULT '0000-00-00 00:00:00', "
              "ADD d40 DATETIME(6) DEFAULT '2020-01-02T03:04:05.123456'",
              "ALTER TABLE {t} ADD d41 TIME DEFAULT '1:2', ADD d42 TIME(2) DEFAULT '-1 02:03:04.567', ADD d43 TIME DEFAULT 10203, "
              "ADD d44 TIME DEFAULT '838:59:59', ADD d45 TIME(6) DEFAULT '12:34:56.000001'",
              "ALTER TABLE {t} ADD d46 YEAR DEFAULT 99, ADD d47 YEAR DEFAULT '0', ADD d48 YEAR DEFAULT 0, "
              "ADD d49 YEAR DEFAULT 5, ADD d50 YEAR DEFAULT 2155, ADD d51 YEAR DEFAULT '69'",
              "ALTER TABLE {t} ADD d52 ENUM('a','b') DEFAULT 'B', ADD d53 ENUM('a ','b') DEFAULT 'a', "
              "ADD d54 SET('a','b','c') DEFAULT 'c,A', ADD d55 SET('a','b','c') DEFAULT 'b,b,a'",
              "ALTER TABLE {t} ADD d56 VARCHAR(10) DEFAULT _utf8mb4'zz', ADD d57 VARCHAR(20) DEFAULT 'it''s' ' joined', "
              "ADD d58 VARCHAR(5) DEFAULT 'a\\'b', ADD d59 VARCHAR(5) DEFAULT \"dq\", ADD d60 VARCHAR(5) DEFAULT N'nat'",
              "ALTER TABLE {t} ADD d61 BIGINT UNSIGNED DEFAULT 18446744073709551615, ADD d62 FLOAT DEFAULT 1.25, "
              "ADD d63 FLOAT(5,2) DEFAULT 1.234, ADD d64 INT DEFAULT NULL",
              "ALTER TABLE {t} ADD d65 BINARY(3) DEFAULT 'a', ADD d66 BLOB DEFAULT 'b', ADD d67 JSON DEFAULT '{{\"a\": 1}}', "
              "ADD d68 TEXT DEFAULT 'txt'",
              "ALTER TABLE {t} ADD d69 DECIMAL(5,2) DEFAULT 1.005, ADD d70 DECIMAL(5,1) DEFAULT -1.25, "
              "ADD d71 DECIMAL(40,10) DEFAULT '1.5', ADD d72 DECIMAL(10,0) DEFAULT 7.5",
              "ALTER TABLE {t} ADD d73 BIT(1) DEFAULT 1, ADD d74 BIT(10) DEFAULT 513, ADD d75 TIMESTAMP NOT NULL "
              "DEFAULT '0000-00-00 00:00:00'",
              "ALTER TABLE {t} ADD n1 INT NOT NULL, ADD n2 VARCHAR(5) NOT NULL, ADD n3 ENUM('p','q') NOT NULL, "
              "ADD n4 SET('p','q') NOT NULL, ADD n5 DATE NOT NULL, ADD n6 DATETIME NOT NULL, ADD n7 TIME NOT NULL",
              "ALTER TABLE {t} ADD n8 YEAR NOT NULL, ADD n9 DECIMAL(6,2) NOT NULL, ADD n10 BIT(5) NOT NULL, "
              "ADD n11 BINARY(4) NOT NULL, ADD n12 BLOB NOT NULL, ADD n13 BIGINT UNSIGNED NOT NULL, "
              "ADD n14 DOUBLE NOT NULL, ADD n15 TIMESTAMP NOT NULL, ADD n16 BIT NOT NULL, ADD n17 CHAR(2) NOT NULL",
              "ALTER TABLE {t} ADD n18 INET6 NOT NULL, ADD n19 UUID NOT NULL, ADD n20 INET4 NOT NULL, "
              "ADD n21 TEXT NOT NULL, ADD n22 VARBINARY(3) NOT NULL, ADD n23 FLOAT NOT NULL",
              "ALTER TABLE {t} ADD d76 INET4 DEFAULT '10.0.0.1', ADD d77 UUID DEFAULT '123e4567-e89b-12d3-a456-426614174000'",
          )),
    Group("unknown_defaults", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT)", ("INSERT INTO {t} VALUES (1, 5)",),
          _cases(
              ("ALTER TABLE {t} ADD u1 TIMESTAMP DEFAULT CURRENT_TIMESTAMP", "evaluates"),
              ("ALTER TABLE {t} ADD u2 DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)",
               "evaluates"),
              ("ALTER TABLE {t} ADD u3 DATETIME DEFAULT NOW()", "evaluates"),
              ("ALTER TABLE {t} ADD u4 VARCHAR(36) DEFAULT (UUID())", "evaluates"),
              ("ALTER TABLE {t} ADD u5 VARCHAR(36) DEFAULT uuid()", "evaluates"),
              ("ALTER TABLE {t} ADD u6 INT DEFAULT (a + 1)", "evaluates"),
              ("ALTER TABLE {t} ADD u7 DATE DEFAULT (CURDATE())", "evaluates"),
              ("ALTER TABLE {t} ADD u8 INT AS (a * 2) VIRTUAL", "generated"),
              ("ALTER TABLE {t} ADD u9 INT GENERATED ALWAYS AS (a + 1) STORED", "generated"),
              ("ALTER TABLE {t} ADD u10 INT AS (a - 1) PERSISTENT", "generated"),
              ("ALTER TABLE {t} ADD u11 INT NOT NULL AUTO_INCREMENT UNIQUE", "AUTO_INCREMENT"),
              ("ALTER TABLE {t} ADD u13 TIMESTAMP DEFAULT '2020-01-01 00:00:00'", "time zone"),
              ("ALTER TABLE {t} ADD u14 DOUBLE DEFAULT (RAND())", "evaluates"),
              ("ALTER TABLE {t} MODIFY u9 INT AS (a + 2) STORED", "generated"),
          )),
    Group("modify", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(10) NOT NULL, c DECIMAL(6,2), d DATE, "
                    "e TEXT, f INT NOT NULL DEFAULT 3, desc3 VARCHAR(5), g INT, h INT, k INT)",
          ("INSERT INTO {t} VALUES (1, 1, 'b', 1.5, '2020-01-01', 'e', 1, 'x', 1, 2, 3), "
           "(2, NULL, '', NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL)",), _cases(
              "ALTER TABLE {t} MODIFY a BIGINT",
              "ALTER TABLE {t} MODIFY COLUMN a BIGINT UNSIGNED",
              "ALTER TABLE {t} MODIFY b VARCHAR(100) NULL",
              "ALTER TABLE {t} MODIFY b VARCHAR(100) NOT NULL DEFAULT ''",
              "ALTER TABLE {t} MODIFY c DECIMAL(12,4)",
              "ALTER TABLE {t} MODIFY c DECIMAL(12,4) FIRST",
              "ALTER TABLE {t} MODIFY COLUMN DESC3 VARCHAR(50)",
              "ALTER TABLE {t} MODIFY COLUMN IF EXISTS nope INT",
              "ALTER TABLE {t} MODIFY a BIGINT UNSIGNED AFTER e",
              "ALTER TABLE {t} MODIFY e MEDIUMTEXT",
              "ALTER TABLE {t} MODIFY d DATETIME",
              "ALTER TABLE {t} MODIFY id BIGINT",
              "ALTER TABLE {t} MODIFY id BIGINT NOT NULL AUTO_INCREMENT",
              "ALTER TABLE {t} MODIFY f INT NULL DEFAULT NULL",
              "ALTER TABLE {t} CHANGE a a2 BIGINT UNSIGNED",
              "ALTER TABLE {t} CHANGE COLUMN a2 A3 BIGINT AFTER id",
              "ALTER TABLE {t} CHANGE COLUMN IF EXISTS nope nope2 INT",
              "ALTER TABLE {t} CHANGE b b VARCHAR(20) CHARACTER SET latin1",
              "ALTER TABLE {t} CHANGE `desc3` `Desc 4` TEXT",
              "ALTER TABLE {t} RENAME COLUMN c TO c2",
              "ALTER TABLE {t} RENAME COLUMN IF EXISTS nope TO n2",
              "ALTER TABLE {t} RENAME COLUMN C2 TO c3",
              "ALTER TABLE {t} CHANGE `Desc 4` `desc 4` TEXT",
              "ALTER TABLE {t} ALTER COLUMN f SET DEFAULT 7",
              "ALTER TABLE {t} ALTER COLUMN f DROP DEFAULT",
              "ALTER TABLE {t} ALTER f SET DEFAULT (1 + 1)",
              "ALTER TABLE {t} MODIFY f INT NULL INVISIBLE",
              "ALTER TABLE {t} MODIFY f INT NULL",
              "ALTER TABLE {t} MODIFY A3 INT, CHANGE b b2 VARCHAR(5), DROP COLUMN d, ADD m INT AFTER b2",
              "ALTER TABLE {t} RENAME COLUMN h TO i, RENAME COLUMN g TO h",
              "ALTER TABLE {t} CHANGE h g2 INT, ADD y INT AFTER g2",
              "ALTER TABLE {t} ADD q2 INT FIRST, MODIFY id BIGINT NOT NULL AUTO_INCREMENT AFTER q2",
              "ALTER TABLE {t} CHANGE i k2 INT, CHANGE k i INT",
              "ALTER TABLE {t} MODIFY m INT FIRST, MODIFY y INT AFTER m",
              "ALTER TABLE {t} CHANGE id ID BIGINT NOT NULL AUTO_INCREMENT",
              "ALTER TABLE {t} MODIFY f TINYINT, MODIFY A3 SMALLINT, MODIFY c3 DECIMAL(14,4)",
          )),
    Group("unknown_serial", "CREATE TABLE {t} (id INT PRIMARY KEY)", ROWS, _cases(
        ("ALTER TABLE {t} ADD u SERIAL FIRST", "AUTO_INCREMENT"),
    )),
    Group("swap", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(10))", ROWS, _cases(
        ("ALTER TABLE {t} RENAME COLUMN a TO b, RENAME COLUMN b TO a", "swap"),
    )),
    Group("drop", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b INT, c INT, d INT, e INT, x INT, y INT, z INT)",
          ("INSERT INTO {t} VALUES (1, 1, 2, 3, 4, 5, 6, 7, 8), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",),
          _cases(
              "ALTER TABLE {t} DROP a",
              "ALTER TABLE {t} DROP COLUMN b",
              "ALTER TABLE {t} DROP COLUMN IF EXISTS nope",
              "ALTER TABLE {t} DROP c, DROP d",
              "ALTER TABLE {t} DROP COLUMN `E`",
              "ALTER TABLE {t} DROP x RESTRICT",
              "ALTER TABLE {t} DROP COLUMN y CASCADE",
              "ALTER TABLE {t} DROP COLUMN z, ADD z INT FIRST",
              "ALTER TABLE {t} ADD w INT, DROP COLUMN IF EXISTS nope2, DROP COLUMN IF EXISTS Z",
          )),
    Group("keys", "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, a INT NOT NULL, b INT, v VARCHAR(20))",
          ("INSERT INTO {t} VALUES (1, 10, 100, 'p'), (2, 20, 200, 'q')",), _cases(
              "ALTER TABLE {t} DROP PRIMARY KEY",
              "ALTER TABLE {t} ADD PRIMARY KEY (id)",
              "ALTER TABLE {t} DROP PRIMARY KEY",
              "ALTER TABLE {t} ADD CONSTRAINT pk PRIMARY KEY USING BTREE (id, a)",
              "ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (a)",
              "ALTER TABLE {t} DROP INDEX `PRIMARY`",
              "ALTER TABLE {t} ADD PRIMARY KEY (b)",
              "ALTER TABLE {t} DROP KEY `primary`, ADD PRIMARY KEY (ID, b)",
              "ALTER TABLE {t} ADD UNIQUE (a), ADD INDEX i (a), ADD KEY k2 (b, a), ADD FULLTEXT INDEX ft (v)",
              "ALTER TABLE {t} DROP INDEX i, RENAME INDEX k2 TO k3",
              "ALTER TABLE {t} ALTER INDEX k3 IGNORED, ALTER KEY k3 NOT IGNORED",
              "ALTER TABLE {t} ADD CONSTRAINT chk CHECK (a >= 0), ADD CHECK (b > 0)",
              "ALTER TABLE {t} DROP CONSTRAINT chk",
              "ALTER TABLE {t} ADD INDEX IF NOT EXISTS i2 (v(5)), DROP INDEX IF EXISTS nope",
              "ALTER TABLE {t} ADD INDEX i3 (v DESC)",
              "ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (id)",
          )),
    Group("options", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, s VARCHAR(10), tx TEXT)",
          ("INSERT INTO {t} VALUES (1, 1, 's', 't'), (2, 2, NULL, NULL)",), _cases(
              "ALTER TABLE {t} ENGINE=InnoDB",
              "ALTER TABLE {t} ENGINE InnoDB ROW_FORMAT=DYNAMIC",
              "ALTER TABLE {t} COMMENT 'x'",
              "ALTER TABLE {t} COMMENT = 'y, z', AUTO_INCREMENT = 100",
              "ALTER TABLE {t} DEFAULT CHARSET=utf8mb4",
              "ALTER TABLE {t} CHARACTER SET latin1",
              "ALTER TABLE {t} DEFAULT CHARACTER SET = utf8mb4 COLLATE = utf8mb4_bin",
              "ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4",
              "ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
              "ALTER TABLE {t} FORCE",
              "ALTER TABLE {t} ENGINE=InnoDB, ALGORITHM=COPY",
              "ALTER TABLE {t} ORDER BY a",
              "ALTER TABLE {t} ORDER BY a, s DESC",
              "ALTER TABLE {t} STATS_PERSISTENT=0, STATS_AUTO_RECALC=1",
              "ALTER TABLE {t} PACK_KEYS=1 CHECKSUM=1",
              "ALTER TABLE {t} DISABLE KEYS",
              "ALTER TABLE {t} ENABLE KEYS",
              "ALTER TABLE {t} PARTITION BY HASH(id) PARTITIONS 3",
              "ALTER TABLE {t} ADD PARTITION PARTITIONS 1",
              "ALTER TABLE {t} COALESCE PARTITION 1",
              "ALTER TABLE {t} ANALYZE PARTITION ALL",
              "ALTER TABLE {t} OPTIMIZE PARTITION p0",
              "ALTER TABLE {t} REBUILD PARTITION p0, p1",
              "ALTER TABLE {t} REMOVE PARTITIONING",
              "ALTER TABLE {t} PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), "
              "PARTITION p1 VALUES LESS THAN MAXVALUE)",
              "ALTER TABLE {t} REORGANIZE PARTITION p1 INTO (PARTITION p1 VALUES LESS THAN (200), "
              "PARTITION p2 VALUES LESS THAN MAXVALUE)",
              "ALTER TABLE {t} ADD COLUMN p INT PARTITION BY KEY (id) PARTITIONS 2",
              "ALTER TABLE {t} REMOVE PARTITIONING",
          )),
    Group("moves_rows", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT) PARTITION BY RANGE (id) "
                        "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), "
                        "PARTITION p2 VALUES LESS THAN MAXVALUE)",
          ("INSERT INTO {t} VALUES (1, 1), (15, 2), (25, 3)",), _cases(
              ("ALTER TABLE {t} TRUNCATE PARTITION p2", "TRUNCATE PARTITION"),
              ("ALTER TABLE {t} DROP PARTITION p1", "DROP PARTITION"),
              ("ALTER TABLE {t} CONVERT PARTITION p0 TO TABLE {t}_p0", "CONVERT"),
              ("ALTER TABLE {t} CONVERT TO CHARACTER SET binary", "binary"),
              ("ALTER TABLE {t} ADD SYSTEM VERSIONING", "system-versioned"),
          )),
    Group("create", "CREATE TABLE {t} (id INT PRIMARY KEY)", (), _cases(
        "CREATE TABLE {t}_a (id INT PRIMARY KEY, f FLOAT UNSIGNED, d DOUBLE UNSIGNED, e DECIMAL(5,2) UNSIGNED ZEROFILL)",
        "CREATE TABLE {t}_b (id SERIAL, v INT)",
        "CREATE TABLE {t}_c (id INT SERIAL DEFAULT VALUE, PRIMARY KEY (id))",
        "CREATE TABLE IF NOT EXISTS {t}_d (a INT, b INT, PRIMARY KEY (a, b) USING BTREE, KEY (b)) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4",
        "CREATE OR REPLACE TABLE {t}_e (a INT KEY, b INT UNIQUE KEY)",
        "CREATE TABLE {t}_f (a INT, PRIMARY KEY (a)) PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (10), "
        "PARTITION p1 VALUES LESS THAN MAXVALUE)",
        "CREATE TABLE {t}_g LIKE {t}_a",
        "CREATE TABLE {t}_h (LIKE {t}_a)",
        "CREATE TABLE `{db}`.`{t}_i` (`Id` int NOT NULL AUTO_INCREMENT, `Name` varchar(20) DEFAULT NULL, "
        "PRIMARY KEY (`id`)) ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
        "CREATE TABLE {t}_j (a INT PRIMARY KEY, b INT AS (a + 1) VIRTUAL, c INT GENERATED ALWAYS AS (a * 2) STORED, "
        "d INT INVISIBLE)",
        "CREATE TABLE {t}_k (g GEOMETRY NOT NULL, p POINT, i6 INET6, u UUID NOT NULL, i4 INET4, j JSON, "
        "CONSTRAINT pk PRIMARY KEY (u))",
        "CREATE TABLE {t}_l (id INT, CONSTRAINT `pk` PRIMARY KEY (id), CONSTRAINT chk CHECK (id > 0), UNIQUE KEY uk (id), "
        "INDEX (id), FOREIGN KEY (id) REFERENCES {t}_a (id) ON DELETE CASCADE ON UPDATE NO ACTION)",
        "CREATE TABLE {t}_m (a INT NOT NULL COMMENT 'c' DEFAULT 4, b VARCHAR(5) COLLATE utf8mb4_bin NULL, "
        "c CHAR(2) CHARACTER SET latin1 NOT NULL DEFAULT 'x', PRIMARY KEY (a))",
        "CREATE TABLE {t}_n (id INT PRIMARY KEY, a TIMESTAMP, b TIMESTAMP NOT NULL, "
        "c TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)",
        "create table {t}_s (id int(11) unsigned not null, primary key(id)) engine=MyISAM",
        "CREATE TABLE {t}_t /* comment */ (\n  `id` BIGINT NOT NULL, -- the key\n  v TEXT,\n  PRIMARY KEY (`id`)\n)",
        "CREATE TEMPORARY TABLE {t}_r (a INT)",
        "CREATE TABLE {t}_u (id INT, a INT, PRIMARY KEY (a, id))",
        "CREATE TABLE {t}_v (id INT NOT NULL, a INT, UNIQUE KEY (id))",
        "CREATE TABLE {t}_w (id INT PRIMARY KEY, e ENUM('a','b') NOT NULL DEFAULT 'b', s SET('x','y'))",
    )),
    Group("create_unknown", "CREATE TABLE {t} (id INT PRIMARY KEY)", ("INSERT INTO {t} VALUES (1)",), _cases(
        ("CREATE TABLE {t}_o SELECT 1 AS a", "SELECT"),
        ("CREATE TABLE {t}_p (id INT PRIMARY KEY) SELECT 2 AS id, 3.5 AS v", "SELECT"),
        ("CREATE TABLE {t}_q (id INT PRIMARY KEY) WITH SYSTEM VERSIONING", "system-versioned"),
    )),
    Group("tables", "CREATE TABLE {t} (id INT PRIMARY KEY, a INT)", ("INSERT INTO {t} VALUES (1, 1), (2, 2)",), _cases(
        "CREATE TABLE {t}_a (id INT PRIMARY KEY)",
        "CREATE TABLE {t}_b (id INT PRIMARY KEY)",
        "RENAME TABLE {t}_a TO {t}_a2, {t}_b TO {t}_b2",
        "ALTER TABLE {t}_a2 RENAME TO {t}_a3",
        "ALTER TABLE {db}.{t}_a3 RENAME AS {t}_a4",
        "RENAME TABLE IF EXISTS {t}_nope TO {t}_nope2",
        "TRUNCATE {t}",
        "TRUNCATE TABLE `{db}`.`{t}_b2`",
        "DROP TABLE {t}_a4, {t}_b2",
        "DROP TABLE IF EXISTS {t}_nope, `{db}`.`{t}_nope2` /* generated by server */",
    )),
    Group("quoting", "CREATE TABLE {t} (id INT PRIMARY KEY, `Mixed Case` INT, `weird``name` INT, `ñandú` VARCHAR(5), "
                     "`select` INT, `x` INT)", ROWS, _cases(
        "ALTER TABLE {t} MODIFY `mixed case` BIGINT",
        "ALTER TABLE {t} CHANGE `WEIRD``NAME` `w2` INT",
        "ALTER TABLE {t} RENAME COLUMN `ÑANDÚ` TO `ñ2`",
        "ALTER TABLE {t} DROP `SELECT`",
        "ALTER TABLE {t} ADD `group` INT AFTER `Mixed Case`",
        "ALTER TABLE {t} ADD `col with spaces` INT FIRST",
        "ALTER TABLE {t} ADD `123` INT, ADD `a.b` INT, ADD `\"dq\"` INT, ADD `--x` INT, ADD `/*x*/` INT, ADD `#h` INT",
        "ALTER TABLE `{t}` MODIFY `col with spaces` BIGINT AFTER `123`",
        "ALTER TABLE {t} ADD `it's` INT DEFAULT 1",
        "ALTER TABLE {t} CHANGE `x` `X` INT",
        "ALTER TABLE {t} CHANGE COLUMN X `x y` INT AFTER `a.b`",
        "ALTER TABLE {t} DROP COLUMN `a.b`, DROP `--x`, DROP `/*x*/`",
        "ALTER\tTABLE\n{t}\n\tADD\n  `t1`\tINT",
        "ALTER TABLE {t} ADD COLUMN `T2` int, add column t3 INT, Add Column T4 Int",
    )),
    Group("mixed", "CREATE TABLE {t} (id INT PRIMARY KEY, p INT, q INT, s INT, w INT, x INT, z INT)",
          ("INSERT INTO {t} VALUES (1, 1, 2, 3, 4, 5, 6), (2, NULL, NULL, NULL, NULL, NULL, NULL)",), _cases(
              "ALTER TABLE {t} ADD a INT, ADD b INT AFTER a, ADD c INT FIRST, DROP x",
              "ALTER TABLE {t} CHANGE z y INT FIRST, MODIFY w BIGINT AFTER y, DROP s, ADD v INT AFTER w",
              "ALTER TABLE {t} RENAME COLUMN p TO p2, ADD r INT AFTER p2",
              "ALTER TABLE {t} DROP COLUMN q, ADD q VARCHAR(3) DEFAULT 'q' AFTER id",
              "ALTER TABLE {t} MODIFY a BIGINT DEFAULT 0, MODIFY b INT DEFAULT 1, ADD COLUMN (d INT, e INT)",
              "ALTER TABLE {t} ADD f INT FIRST, ADD g INT FIRST, ADD h INT AFTER g",
              "ALTER TABLE {t} CHANGE a a1 INT AFTER e, CHANGE b b1 INT FIRST, ADD i INT AFTER a1",
              "ALTER TABLE {t} DROP COLUMN d, DROP COLUMN e, DROP COLUMN f, DROP COLUMN g, DROP COLUMN h",
              "ALTER TABLE {t} ADD k INT, ALGORITHM=INPLACE, ADD l INT AFTER k, LOCK=NONE, ADD INDEX (k)",
              "ALTER TABLE {t} ADD m INT, ADD INDEX im (m), ENGINE=InnoDB, COMMENT 'mixed'",
              "ALTER TABLE {t} DROP INDEX im, ADD INDEX im2 (m, k), FORCE",
              "ALTER TABLE {t} RENAME COLUMN k TO k2, RENAME COLUMN l TO k",
              "ALTER TABLE {t} MODIFY COLUMN k BIGINT FIRST, CHANGE COLUMN k2 l INT AFTER k",
              "ALTER TABLE {t} ADD n1 INT DEFAULT 1, ADD n2 VARCHAR(4) DEFAULT 'n2' FIRST, ADD n3 DECIMAL(4,1) DEFAULT 2.25 AFTER n2",
              "ALTER TABLE {t} ALTER COLUMN n1 SET DEFAULT 5, MODIFY n3 DECIMAL(6,2), DROP n2",
          )),
    Group("retype", "CREATE TABLE {t} (id INT PRIMARY KEY, i INT, t TINYINT, v VARCHAR(5), c CHAR(3), x TEXT, "
                    "d DATE, f FLOAT, m DECIMAL(6,2), e ENUM('a','b'), st SET('a','b'), b VARBINARY(4), y YEAR, "
                    "u INT UNSIGNED, dt DATETIME)",
          ("INSERT INTO {t} VALUES (1, 5, 1, 'v', 'c', 'x', '2020-01-02', 1.5, 12.25, 'b', 'a,b', 'bb', 2001, 7, "
           "'2020-01-02 03:04:05'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
           "NULL)",), _cases(
              "ALTER TABLE {t} MODIFY i BIGINT",
              "ALTER TABLE {t} MODIFY i DECIMAL(22,2)",
              "ALTER TABLE {t} MODIFY t SMALLINT",
              "ALTER TABLE {t} MODIFY t INT",
              "ALTER TABLE {t} MODIFY v VARCHAR(500)",
              "ALTER TABLE {t} MODIFY c VARCHAR(30)",
              "ALTER TABLE {t} MODIFY x MEDIUMTEXT",
              "ALTER TABLE {t} MODIFY x LONGTEXT",
              "ALTER TABLE {t} MODIFY d DATETIME",
              "ALTER TABLE {t} MODIFY f DOUBLE",
              "ALTER TABLE {t} MODIFY m DECIMAL(10,4)",
              "ALTER TABLE {t} MODIFY e ENUM('a','b','c')",
              "ALTER TABLE {t} MODIFY st SET('a','b','c')",
              "ALTER TABLE {t} MODIFY b VARBINARY(40)",
              "ALTER TABLE {t} MODIFY b BLOB",
              "ALTER TABLE {t} MODIFY u BIGINT UNSIGNED",
              "ALTER TABLE {t} MODIFY dt DATETIME(6)",
              "ALTER TABLE {t} MODIFY y SMALLINT",
              "ALTER TABLE {t} MODIFY v TEXT",
              "ALTER TABLE {t} MODIFY c CHAR(30) DEFAULT ''",
          )),
    Group("create_more", "CREATE TABLE {t} (id INT PRIMARY KEY)", (), _cases(
        "CREATE TABLE {t}_a (id INT NOT NULL, a INT DEFAULT 1 NOT NULL, b INT NULL COMMENT 'x' UNIQUE, "
        "c VARCHAR(3) NOT NULL COLLATE utf8mb4_bin DEFAULT 'x' INVISIBLE, PRIMARY KEY (id)) ENGINE=InnoDB, COMMENT='t', "
        "AUTO_INCREMENT=3",
        "CREATE TABLE IF NOT EXISTS {t} (x INT)",
        "CREATE TABLE {t}_b (a INT, b INT, KEY a (a), INDEX idx USING BTREE (b), FULLTEXT KEY ft (c), c TEXT, "
        "CONSTRAINT PRIMARY KEY (a))",
        "CREATE TABLE {t}_c (`period` INT, `vector` INT, `system` INT, `versioning` INT, id INT KEY) ENGINE=Aria",
        "CREATE TABLE {t}_d (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, s VARCHAR(255) NOT NULL, "
        "created DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, updated TIMESTAMP NULL ON UPDATE CURRENT_TIMESTAMP, "
        "KEY s (s(10)))",
        "CREATE TABLE {t}_e (i1 TINYINT, i2 SMALLINT UNSIGNED, i3 MEDIUMINT ZEROFILL, i4 INT(4), i5 BIGINT, "
        "d1 DECIMAL(30,10), d2 NUMERIC, f1 FLOAT(7,3), f2 DOUBLE PRECISION, f3 REAL, b1 BIT(3), b2 BOOL, "
        "s1 CHAR(2) CHARACTER SET ascii, s2 NVARCHAR(9), s3 TINYTEXT, s4 LONGTEXT, y1 BINARY(2), y2 LONGBLOB, "
        "e1 ENUM('x'), e2 SET('p','q'), t1 DATE, t2 TIME(1), t3 DATETIME(2), t4 TIMESTAMP(3) NULL, t5 YEAR, "
        "j JSON, id INT AUTO_INCREMENT, PRIMARY KEY (id))",
        "CREATE TABLE `{t}_f` (`Id` INT NOT NULL, `Name` VARCHAR(10), PRIMARY KEY (`ID`), UNIQUE KEY `NAME` (`name`))",
        "CREATE TABLE {t}_g (id INT PRIMARY KEY) PARTITION BY HASH (id) PARTITIONS 4",
        "CREATE TABLE {t}_h (id INT, d DATE, PRIMARY KEY (id, d)) PARTITION BY RANGE COLUMNS (d) "
        "(PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN (MAXVALUE))",
        "CREATE TABLE {t}_i (id INT PRIMARY KEY, r INT) PARTITION BY LIST (id) (PARTITION p0 VALUES IN (1, 2), "
        "PARTITION p1 VALUES IN (3))",
        "CREATE OR REPLACE TABLE {t}_i (id INT PRIMARY KEY, replaced INT)",
        "CREATE TABLE {t}_j (id INT PRIMARY KEY, `a``b` INT, `ü` INT, `key` INT)",
        "CREATE TABLE {db}.{t}_k (id INT PRIMARY KEY, v VARCHAR(5)) DEFAULT CHARSET=latin1",
        "CREATE TABLE {t}_l (id INT PRIMARY KEY, CHECK (id > 0), CONSTRAINT c2 CHECK (id < 100))",
        "CREATE TABLE {t}_m (id INT UNSIGNED NOT NULL DEFAULT 0 PRIMARY KEY COMMENT 'pk')",
    )),
)

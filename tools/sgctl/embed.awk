# embed.awk: turn the console's files into C string constants (console_assets.h).
# Each input file NAME.EXT becomes "static const char NAME_EXT[] = ...;".  Every
# character but the printable ASCII ones that need no escape is written as an
# octal escape, so the output is plain ASCII whatever awk (mawk, gawk, busybox).
BEGIN {
	print "/* generated from console.html, console.js and console.css by embed.awk: do not edit */"
	for (i = 0; i < 256; i++)
		ord[sprintf("%c", i)] = i
	open = 0
	plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 !#$%&'()*+,-./:;<=>@[]^_`{|}~"
}
FNR == 1 {
	if (open)
		print ";"
	name = FILENAME
	sub(/.*\//, "", name)
	gsub(/[^A-Za-z0-9]/, "_", name)
	print "static const char " name "[] ="
	open = 1
}
{
	out = ""
	n = length($0)
	for (i = 1; i <= n; i++)
	{
		c = substr($0, i, 1)
		if (index(plain, c) > 0)
			out = out c
		else
			out = out sprintf("\\%03o", ord[c])
	}
	print "\t\"" out "\\n\""
}
END {
	if (open)
		print ";"
}

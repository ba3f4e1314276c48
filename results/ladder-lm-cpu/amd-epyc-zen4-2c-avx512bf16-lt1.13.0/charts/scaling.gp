set datafile separator ','
set key top left noenhanced
set grid
set title 'Predicted scaling (lines) and measured rungs (points)'."\n".'ladder-lm-cpu on amd-epyc-zen4-2c-avx512bf16-lt1.13.0' noenhanced
set ylabel 'samples/s, all devices' noenhanced
set xlabel 'devices'
set xrange [0.5:8.5]
set yrange [0:*]
set xtics 1
set terminal svg size 960,540 dynamic font "sans,12" background "white"
set output 'scaling.svg.part'
plot for [i=2:5:2] 'scaling.csv' using 1:i with linespoints lw 2 pt 6 title columnhead(i), for [i=3:5:2] 'scaling.csv' using 1:i with points pt 7 ps 2 title columnhead(i)
set output
set terminal pngcairo size 960,540 font "sans,11"
set output 'scaling.png.part'
plot for [i=2:5:2] 'scaling.csv' using 1:i with linespoints lw 2 pt 6 title columnhead(i), for [i=3:5:2] 'scaling.csv' using 1:i with points pt 7 ps 2 title columnhead(i)
set output
